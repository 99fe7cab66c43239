-- wrk script for the reference agent server (docs/benchmarks.md).
-- Every request starts a run in a fresh session; `wrk ... -- keyed` sends a
-- fresh X-Helix-Request-Key with each, `-- keyless` none; `-- health` only
-- asks GET /health (no store, no run: the floor of the machine and the
-- HTTP stack). Prints p99.9 and the maximum latency, which wrk's own
-- --latency table lacks.
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

function init(args)
  keyed = args[1] == "keyed"
  health = args[1] == "health"
  -- Unique per thread and per wrk run, so runs never share sessions.
  prefix = string.format("wrk%d-%d-%d", os.time(), id, math.random(1, 1000000000))
  counter = 0
end

function request()
  if health then
    return wrk.format("GET", "/health")
  end
  counter = counter + 1
  local headers = { ["Content-Type"] = "application/json" }
  if keyed then
    headers["X-Helix-Request-Key"] = prefix .. "-k" .. counter
  end
  return wrk.format("POST", "/sessions/" .. prefix .. "-" .. counter .. "/start", headers,
    '{"input":{"text":"hi"}}')
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    "WRK requests=%d seconds=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000, latency.max / 1000, errors))
end
