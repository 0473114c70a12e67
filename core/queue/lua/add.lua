--[[ add: append tasks to an open (not yet sealed) request: streamed fan-out.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream
Derived:   tr:<prio>:<handler>:<tenant>, delayed:<prio>, dprio (see _base.lua)

ARGV[1] rid   ARGV[2] now (ms)
ARGV[3] expected total before this batch ("" = any): makes a resumed batch append only where
        the previous one stopped, never twice
ARGV[4..] task payloads (JSON text)

Returns the request's new total.
Events: "added" (tasks, ids, text) when these tasks are among the request's first
SEARCH_TASKS (append_tasks(), _readiness.lua), so that the mirror can index them for search.
A scheduled request that is not sealed yet takes tasks too: they wait for its due time.

Errors (as integers): -2 no such request, -3 request is sealed (or cancelled/finished),
                      -6 the request's total is not the expected one
--]]
--@include base requests readiness index leasing

local rid, now = ARGV[1], now_ms(ARGV[2])
local h = load_req(rid)
if not h then return -2 end
local scheduled = h.state == 'scheduled'
if scheduled then
  if redis.call('HGET', KEYS[9], 'due_state') ~= 'open' then return -3 end
elseif h.state ~= 'open' then
  return -3
end
if ARGV[3] ~= '' and tonumber(ARGV[3]) ~= h.total then return -6 end
local sk = KEYS[10]
local ids, txt = append_tasks(sk, ARGV, 4, h.total)
local n = #ARGV - 3
-- Only while the request's first tasks come in: the mirror indexes them for search.
if ids ~= '' then event('added', rid, 'tasks', text(n), 'ids', ids, 'text', txt) end
add(h, 'total', n)
add(h, 'waiting', n)
set_field(h, 'updated_ms', now)
if not scheduled then bump_waiting_stat(h, n) end  -- counted there once due
stat('submitted', n)
sync_ready(h)
dispatch_idle()
return h.total
