-- A POST whose JSON body differs on every request (a counter in one field), so that no
-- per-request cache in the server can answer from an earlier request.
-- Arguments after "--": body template with the placeholder @N@ for the counter.
-- Prints one "BENCH_JSON {...}" line from done(), counting status codes.

local threads = {}
local next_tid = 0

function setup(thread)
   next_tid = next_tid + 1
   thread:set("tid", next_tid)
   table.insert(threads, thread)
end

function init(args)
   template = args[1]
   counter = 0
   statuses = {}
end

function request()
   counter = counter + 1
   local body = string.gsub(template, "@N@", tid .. "-" .. counter)
   return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
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
