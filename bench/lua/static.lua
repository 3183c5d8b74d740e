-- One fixed request (wrk pre-builds it once): baseline, free endpoint, 402 challenge.
-- Arguments after "--": method, body ("" for none), count_statuses ("1" to count codes),
-- optionally an Authorization header value, and optionally one more header as
-- "Name: value" (e.g. "Accept-Payment: lightning/charge").
-- Prints one "BENCH_JSON {...}" line from done().

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   wrk.method = args[1] or "GET"
   local body = args[2] or ""
   if body ~= "" then
      wrk.body = body
      wrk.headers["Content-Type"] = "application/json"
   end
   if args[4] and args[4] ~= "" then
      wrk.headers["Authorization"] = args[4]
   end
   if args[5] and args[5] ~= "" then
      local name, value = string.match(args[5], "^([^:]+):%s*(.*)$")
      wrk.headers[name] = value
   end
   statuses = {}
   if args[3] == "1" then
      response = function(status, headers, body)
         statuses[status] = (statuses[status] or 0) + 1
      end
   end
end

function done(summary, latency, requests)
   local codes = {}
   for _, thread in ipairs(threads) do
      local s = thread:get("statuses") or {}
      for code, n in pairs(s) do
         codes[code] = (codes[code] or 0) + n
      end
   end
   local parts = {}
   for code, n in pairs(codes) do
      table.insert(parts, string.format('"%d":%d', code, n))
   end
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d,"mean":%.1f},' ..
      '"statuses":{%s},"exhausted_threads":0,"credentials_used":0}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency.max, latency.mean, table.concat(parts, ",")))
end
