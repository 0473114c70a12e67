--[[ note: record a run an operator started (run now), so the runs list shows it and the
overlap policy waits for it like any other run.

KEYS[1] schedule hash   KEYS[2] runs list
ARGV[1] now (ms)   ARGV[2] request id   ARGV[3] the run's request ids, space-separated
ARGV[4] who        ARGV[5] runs kept
Returns 1, or -2 when there is no such schedule (removed meanwhile).
]]
if redis.call('HEXISTS', KEYS[1], 'spec') == 0 then return -2 end
redis.call('HSET', KEYS[1], 'last_rids', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'fired', 1)
redis.call('LPUSH', KEYS[2], cjson.encode({slot = ARGV[1], rid = ARGV[2],
  at = tonumber(ARGV[1]), status = 'run-now', by = ARGV[4]}))
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[5]) - 1)
return 1
