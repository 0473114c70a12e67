--[[ set_limit: create, change or remove a limit on a key (see _limits.lua). A concurrency cap
counts what its key holds now: the set of its leases is made afresh from the queue's leases
(and those an operator revoked, whose runs may go on), so a cap set while tasks run counts
them, at once. Its cost is one look at each lease's request (the queue's running tasks).

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:lim:<name>:held     the leases its concurrency counts
KEYS[10]   <p>:{Q}:lim:<name>:starts   its rate's window
Derived:   limits, req:<rid>

ARGV[1] now (ms)   ARGV[2] the limit's name
ARGV[3] its spec, "<on>|<value>|<rate>|<per_ms>|<conc>" (checked by the caller); "" = remove

Returns 1 if it existed before (changed or removed), 0 if not
--]]
--@include base requests

local now, name, spec = now_ms(ARGV[1]), ARGV[2], ARGV[3]
local existed = redis.call('HEXISTS', K_LIMITS, name)
redis.call('DEL', KEYS[9])
if spec == '' then
  redis.call('HDEL', K_LIMITS, name)
  redis.call('DEL', KEYS[10])
  return existed
end
redis.call('HSET', K_LIMITS, name, spec)
local on, value, conc = string.match(spec, '^([^|]*)|([^|]*)|[^|]*|[^|]*|([^|]*)$')
if conc ~= '' and on ~= 'field' then  -- a field's values count from now
  local held = {}
  for _, index in ipairs({K_LEASES, K_REVOKED}) do
    for _, lease in ipairs(redis.call('ZRANGE', index, 0, -1)) do
      local rid = string.match(lease, '^([^/]+)/')
      local h = rid and load_req(rid, true)
      if h and (on == 'queue' or (on == 'handler' and h.handler == value)
                or (on == 'tenant' and h.tenant == value)
                or (on == 'resource' and h.rs
                    and string.find(' ' .. h.rs .. ' ', ' ' .. value .. ' ', 1, true))) then
        held[#held + 1] = now
        held[#held + 1] = lease
      end
    end
  end
  for i = 1, #held, 1000 do
    redis.call('ZADD', KEYS[9], unpack(held, i, math.min(i + 999, #held)))
  end
end
return existed
