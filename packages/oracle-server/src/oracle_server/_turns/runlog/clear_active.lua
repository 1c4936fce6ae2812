-- Clear a session's active-run pointer only if it still names the run that ended.
-- KEYS[1] = the session's pointer (<prefix>session:<id>); ARGV[1] = the run id.
-- Returns 1 when the pointer was deleted, 0 when it names another run (or is gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
