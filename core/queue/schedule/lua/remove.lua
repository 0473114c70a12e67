--[[ remove: delete one schedule, its runs and its places in the due and names zsets. The
requests it made stay, as any request does, until their retention ends.

KEYS[1] schedule hash   KEYS[2] due zset   KEYS[3] names zset   KEYS[4] runs list
ARGV[1] the schedule's name
Returns 1 removed, 0 no such schedule.
]]
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[4])
return redis.call('DEL', KEYS[1])
