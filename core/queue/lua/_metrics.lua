-- lua/_metrics.lua: the handlers' per-minute metrics, counted in memory and written by finish().
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: metrics_of, metric, metric_done, metric_failed_run, metric_tally.
--
--@include base

-- Per-handler metrics of this minute (see the header), written by finish(): one HINCRBY per
-- handler and field for the whole call, however many tasks it finished. A timed task done,
-- the hot path, costs its bucket's field and the time's: its count is the buckets' sum.
local function metrics_of(handler)
  local m = METRICS[handler]
  if not m then
    m = {}
    METRICS[handler] = m
  end
  return m
end

-- Add n to a counter of the handler ('f' dead-lettered, 'r' retried).
local function metric(handler, f, n)
  if not METRICS_ON then return end
  local m = metrics_of(handler)
  m[f] = (m[f] or 0) + n
end

-- A task of the handler was done: its run's time as the client sent it, "<bucket>:<us>"
-- (the bucket index is the field's name, as sent), or "-" (not timed).
local function metric_done(handler, t)
  if not METRICS_ON then return end
  local m = metrics_of(handler)
  local b, us = string.match(t, '^(%d+):(%d+)$')
  if b then
    m[b] = (m[b] or 0) + 1
    m.us = (m.us or 0) + tonumber(us)
  else
    m.d = (m.d or 0) + 1
  end
end

-- A failed run's time ("<bucket>:<us>" or "-"), after metric() counted its outcome.
local function metric_failed_run(handler, t)
  if not METRICS_ON then return end
  local us = string.match(t, '^%d+:(%d+)$')
  if us then
    local m = metrics_of(handler)
    m.fus = (m.fus or 0) + tonumber(us)
  end
end

-- A worker's tally of acks accepted earlier ("<handler>|<field> <n>" pairs, the fields of a
-- done task: a bucket index, "us" or "d"): added as they are. Counted whatever METRICS_ON
-- says (the worker that tallied them had its metrics on); a malformed pair is skipped.
local function metric_tally(text)
  for handler, f, n in string.gmatch(text, '([^|%s]+)|(%w+) (%d+)') do
    if f == 'us' or f == 'd' or string.match(f, '^%d+$') then
      local m = metrics_of(handler)
      m[f] = (m[f] or 0) + tonumber(n)
    end
  end
end
