--[[ toggle: pause or resume one schedule.

KEYS[1] schedule hash   KEYS[2] due zset
ARGV[1] "pause" or "resume"
ARGV[2] now (ms)
ARGV[3] resume: the next slot after now ("" none): the slots of the pause are not run
ARGV[4] the schedule's name
ARGV[5] who (pause: kept as paused_by)

Returns 1 done, 0 already so, -2 no such schedule. Bumps the version, so a claim read
before is refused.
]]
local h = KEYS[1]
local cur = redis.call('HMGET', h, 'spec', 'paused', 'pending')
if not cur[1] then return -2 end
if ARGV[1] == 'pause' then
  if cur[2] then return 0 end
  redis.call('HSET', h, 'paused', ARGV[2], 'paused_by', ARGV[5])
  redis.call('ZREM', KEYS[2], ARGV[4])
else
  if not cur[2] then return 0 end
  redis.call('HDEL', h, 'paused', 'paused_by')
  redis.call('HSET', h, 'next', ARGV[3])
  if cur[3] then
    redis.call('ZADD', KEYS[2], ARGV[2], ARGV[4])
  elseif ARGV[3] ~= '' then
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  end
end
redis.call('HINCRBY', h, 'version', 1)
redis.call('HSET', h, 'updated_ms', ARGV[2])
return 1
