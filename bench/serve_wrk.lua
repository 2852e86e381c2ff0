-- serve_wrk.lua: wrk load for kinetic serve: short completions with varying seeds and a
-- streaming request every fourth time. Usage: wrk -s bench/serve_wrk.lua http://127.0.0.1:PORT
local n = 0
request = function()
  n = n + 1
  local stream = (n % 4 == 0) and "true" or "false"
  local body = string.format(
    '{"prompt":"Load test %d: once upon a time","max_tokens":16,"temperature":0.8,"seed":%d,"stream":%s}',
    n, n, stream)
  return wrk.format("POST", "/v1/completions", {["Content-Type"] = "application/json"}, body)
end

local bad = 0
response = function(status, headers, body)
  if status ~= 200 and status ~= 503 then
    bad = bad + 1
  end
end

done = function(summary, latency, requests)
  io.write(string.format("non-200/503 responses: %d\n", bad))
end
