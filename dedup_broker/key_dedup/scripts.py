"""The Lua scripts of the key store (``store.py``), one call each over a batch of keys.

Each runs atomically on the Redis (or Redis Cluster node) holding the scope's keys:
``KEYS`` are the scope's marker, checkpoint and bucket hashes, ``ARGV`` the broker's
clock, the window and pending timeout, and the keys with their values.
"""

_LIVE = """
local function live(v, now, window, pending)
  if string.sub(v, 1, 2) == 't:' then
    if tonumber(string.sub(v, 3)) + window > now then return v, math.huge end
    return nil, nil
  end
  local sep = string.find(v, ':', 3, true)
  local at = tonumber(string.sub(v, 3, sep - 1))
  if at + pending > now then return 'p:' .. string.sub(v, sep + 1), at end
  return nil, nil
end
"""
"""A bucket's value as the broker sees it: a stored key inside its window (it outranks
any claim), or a claim inside the pending timeout, as ``p:<owner>`` with its time."""

CLAIM = (
    _LIVE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local now, window, pending = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local first = 6
local best, rank = {}, {}
for b = 2, #KEYS do
  for lo = first, #ARGV, 1000 do
    local hi = math.min(lo + 999, #ARGV)
    local values = redis.call('HMGET', KEYS[b], unpack(ARGV, lo, hi))
    for j = 1, #values do
      if values[j] then
        local i = lo - first + j
        local v, at = live(values[j], now, window, pending)
        if v and (rank[i] == nil or at > rank[i]) then best[i], rank[i] = v, at end
      end
    end
  end
end
local out, new, o, n = {}, {}, 0, 0
local claim = ARGV[4]
for i = 1, #ARGV - first + 1 do
  if best[i] then
    out[o + 1] = i - 1
    out[o + 2] = best[i]
    o = o + 2
  else
    new[n + 1] = ARGV[first + i - 1]
    new[n + 2] = claim
    n = n + 2
    if n >= 2000 then
      redis.call('HSET', KEYS[2], unpack(new, 1, n))
      n = 0
    end
  end
end
if n > 0 then redis.call('HSET', KEYS[2], unpack(new, 1, n)) end
redis.call('PEXPIREAT', KEYS[2], ARGV[5])
return out
"""
)
"""Claims every free key in the current bucket (``KEYS[2]``, read with the older ones);
answers (index, value) pairs for the keys it did not claim only, so a group of new keys
costs a short reply."""

CONFIRM = """
local pairs_count, runs = tonumber(ARGV[2]), tonumber(ARGV[3])
local run = 4 + 2 * pairs_count
local field = run + 2 * runs
local args, n = {}, 0
for r = 0, runs - 1 do
  local value = 't:' .. ARGV[run + 2 * r]
  for _ = 1, tonumber(ARGV[run + 2 * r + 1]) do
    args[n + 1] = ARGV[field]
    args[n + 2] = value
    n = n + 2
    field = field + 1
    if n >= 2000 then
      redis.call('HSET', KEYS[3], unpack(args, 1, n))
      n = 0
    end
  end
end
if n > 0 then redis.call('HSET', KEYS[3], unpack(args, 1, n)) end
redis.call('PEXPIREAT', KEYS[3], ARGV[1])
redis.call('UNLINK', KEYS[4])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for j = 0, pairs_count - 1 do
  redis.call('HSET', KEYS[2], ARGV[4 + 2 * j], ARGV[5 + 2 * j])
end
return 1
"""
"""Stores keys with their anchors, given as runs (anchor, how many keys): the keys of
one entry share its publish time. Unlinks the bucket no window reaches any more (freed
off Redis's main thread, where an expiring bucket of millions of keys would be freed on
it)."""

RELEASE = """
local n = 0
for b = 1, #KEYS do
  for lo = 2, #ARGV, 1000 do
    local hi = math.min(lo + 999, #ARGV)
    local values = redis.call('HMGET', KEYS[b], unpack(ARGV, lo, hi))
    for j = 1, #values do
      local v = values[j]
      if v and string.sub(v, 1, 2) == 'p:' then
        local sep = string.find(v, ':', 3, true)
        if string.sub(v, sep + 1) == ARGV[1] then
          redis.call('HDEL', KEYS[b], ARGV[lo + j - 1])
          n = n + 1
        end
      end
    end
  end
end
return n
"""

CONFIRM_PACKED = """
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[3])
  redis.call('PEXPIREAT', KEYS[3], ARGV[1])
end
redis.call('UNLINK', KEYS[4])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local pairs_count = tonumber(ARGV[2])
for j = 0, pairs_count - 1 do
  redis.call('HSET', KEYS[2], ARGV[4 + 2 * j], ARGV[5 + 2 * j])
end
return 1
"""
"""A single writer's confirmation: its stored keys as one packed value appended to the
current bucket's list (one Redis write per group, not per key), then the checkpoints,
as ``CONFIRM`` does. Memory decides for such a scope; Redis's copy is read back whole
when the topic is loaded."""

TAKE_OVER = (
    _LIVE
    + """
local now, window, pending = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for b = 1, #KEYS do
  local value = redis.call('HGET', KEYS[b], ARGV[7])
  if value then
    local v = live(value, now, window, pending)
    if v and v ~= ARGV[4] then return 0 end
  end
end
redis.call('HSET', KEYS[1], ARGV[7], ARGV[5])
redis.call('PEXPIREAT', KEYS[1], ARGV[6])
return 1
"""
)
"""Replaces a dead owner's claim (``ARGV[4]``) with ours, unless the key is stored or
another live claim holds it."""
