-- Paid calls: every request carries its own credential, never one twice.
-- Arguments after "--": credentials file, path, JSON body, thread count, and the
-- Authorization scheme the lines are sent under (default L402; Payment for session
-- bearer credentials).
-- Thread i (1-based) takes lines i, i+T, i+2T, ...; its connections share that
-- list through one counter, so no two requests anywhere use the same line.
-- When a thread runs out it stops: the run is bounded by the credentials.
-- Prints one "BENCH_JSON {...}" line from done().

local threads = {}
local next_tid = 0

function setup(thread)
   next_tid = next_tid + 1
   thread:set("tid", next_tid)
   table.insert(threads, thread)
end

function init(args)
   local file, path, body = args[1], args[2], args[3]
   local nthreads = tonumber(args[4] or "1")
   scheme = (args[5] or "L402") .. " "
   creds = {}
   local n = 0
   for line in io.lines(file) do
      if n % nthreads == tid - 1 and line ~= "" then
         creds[#creds + 1] = line
      end
      n = n + 1
   end
   local template = wrk.format("POST", path, {
      ["Content-Type"] = "application/json",
      ["Authorization"] = "@AUTH@",
   }, body)
   local at = string.find(template, "@AUTH@", 1, true)
   head = string.sub(template, 1, at - 1)
   tail = string.sub(template, at + 6)
   used = 0
   exhausted = 0
   statuses = {}
end

function request()
   if used >= #creds then
      -- Out of credentials: stop this thread; the request returned here is the
      -- last one again (never counted: the loop ends before its response).
      exhausted = 1
      wrk.thread:stop()
      return head .. scheme .. creds[#creds] .. tail
   end
   used = used + 1
   return head .. scheme .. creds[used] .. tail
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
   local codes, exhausted_threads, credentials_used = {}, 0, 0
   for _, thread in ipairs(threads) do
      local s = thread:get("statuses") or {}
      for code, n in pairs(s) do
         codes[code] = (codes[code] or 0) + n
      end
      exhausted_threads = exhausted_threads + (thread:get("exhausted") or 0)
      credentials_used = credentials_used + (thread:get("used") or 0)
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
      '"statuses":{%s},"exhausted_threads":%d,"credentials_used":%d}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency.max, latency.mean, table.concat(parts, ","),
      exhausted_threads, credentials_used))
end
