-- wrk: every request inserts one job through the REST API (a no-op due in a day, so that the run
-- measures the insert path: token check, validation, the insert and its audit entry, one commit).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("KICKOFF_BENCH_TOKEN")
wrk.body = '{"kind": "noop", "schedule_in_ms": 86400000, "args": {"game": 7}}'

-- Any answer but 201 is counted and shown: a bench that silently measured errors would lie.
local failed = 0
function response(status, headers, body)
  if status ~= 201 then
    failed = failed + 1
    if failed <= 3 then io.stderr:write("HTTP " .. status .. ": " .. body .. "\n") end
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    '{"bench":"api_insert","requests":%d,"seconds":%.1f,"per_second":%.0f,"p50_ms":%.2f,"p90_ms":%.2f,"p99_ms":%.2f,"max_ms":%.2f,"errors":%d}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000, summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout))
end
