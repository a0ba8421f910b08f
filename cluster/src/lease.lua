-- velvet-rope cluster tier: one client's request to a lease root, atomically (the same
-- grants as the core's `allocate` over every live client, then clamped to what the others
-- hold; tests/leases/root.rs holds the two to the same answers).
--
-- A request costs the same however many clients lease the resource. The resource keeps its
-- sums over its clients (`agg`) and, per priority band, a sorted set of the clients' demands
-- by wants per subclient, split at a threshold `t` into those at or under it (their wants in
-- `s`) and those over it (their subclients in `a`). Fair shares are water-filling: the level
-- `L` with s + L * a = the band's capacity, found by moving the split from where the last
-- request left it (the members between the two levels cross, a few per request when demands
-- change a little); proportional shares move the split to the equal share. Clients whose
-- lease or earlier grant ended are taken out a few per request (LAPSES, soonest first, from a
-- sorted set of deadlines); one not taken out yet keeps counting what it holds (which can only
-- lower grants) and what it wants (under fair share that only lowers others' shares; under
-- proportional share it moves the equal share, and so the split of the rest, until it is
-- taken out). The reply's client count includes them.
--
-- Costs: a request runs about 15 commands whatever the clients; members crossing the split
-- cost more (a band whose level swings far each request moves every member in between), and
-- each priority band is a set of its own (a request touches its own, and pushes every band's
-- expiry when one is made).
--
-- What the clients hold together is counted exactly: in whole units of 2^-40 of the
-- capacity's binary order (integers, exact in a double), and a grant is rounded down to a
-- unit. A grant never exceeds the capacity less what every other client may be using.
--
-- KEYS[1]  the resource's hash: `born` (when the table was made), `agg` (the sums) and
--          `c:<client>` (records)
-- KEYS[2]  the deadlines (a sorted set): each client at the next time its record changes
--          (its lease ends, or an earlier grant it may still use)
--          The bands' sets are KEYS[1] .. ':b' .. priority (the same hash slot).
-- ARGV[1]  the client's id
-- ARGV[2]  its request (w: wants, h: has, s: subclients, p: priority; or x: true, a
--          release: it gives back all it holds)
-- ARGV[3]  the resource's terms (k: 0 none, 1 static, 2 proportional, 3 fair or reserved
--          plus shared; c: capacity; l: lease ms; m: the store's margin ms; n: learning ms)
-- ARGV[4]  the server's `run_id` as read when the connection was made ('' if unknown); the
--          script adds the replication id it reads now (`INFO replication`). Together they
--          are the server's identity: another than the table last saw means a restart or a
--          failover (writes may be lost), and the table learns anew, as a new one does. (Read
--          here, in the same atomic step as the grant, no grant is computed on a table that
--          lost writes without its knowing: a server demoted and promoted again keeps its
--          run_id, not its replication id.)
-- ARGV[5]  (tests only; absent in production) the store's clock in ms, in place of TIME
-- Returns (g: the grant, n: clients counted, l: learning; x: whether a release found a
-- record).

local LAPSES = 16
local BATCH = 32

local key, deadlines = KEYS[1], KEYS[2]
local id = ARGV[1]
local req = cmsgpack.unpack(ARGV[2])
local terms = cmsgpack.unpack(ARGV[3])
local now
-- A test's clock: the server's expiry does not follow it, so expiries are pushed every call.
local test_clock = ARGV[5] ~= nil and ARGV[5] ~= ''
if test_clock then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Bad input is refused before anything is written (the caller checks it too).
local function finite(x)
  return type(x) == 'number' and x == x and x > -math.huge and x < math.huge
end
if not (finite(now) and finite(req.w) and finite(req.h) and req.w >= 0 and req.h >= 0
    and finite(req.s)
    and req.s >= 1 and finite(req.p) and req.p >= 0 and finite(terms.c) and finite(terms.l)
    and finite(terms.m) and finite(terms.n) and terms.k >= 0 and terms.k <= 3
    and terms.l % 1 == 0 and terms.m % 1 == 0 and terms.n % 1 == 0 and terms.l >= 0
    and terms.m >= 0 and terms.n >= 0 and 2 * terms.l + terms.n + terms.m < 1e15) then
  return redis.error_reply('ERR velvet-rope lease.lua: a request out of range')
end

-- Negative zeros made positive (a band is named by its priority, a member by its wants).
req.w, req.h, req.p = req.w + 0, req.h + 0, req.p + 0
local kind, cap = terms.k, terms.c
if cap < 0 then cap = 0 end
-- The unit: 2^-40 of the power of two above the capacity (the table keeps the one it was
-- made with while the capacity stays under 2^51 of them: a capacity that changes, or hosts
-- whose configurations differ during a rollout, do not make it count anew).
local unit
if cap > 0 then
  local _, e = math.frexp(cap)
  unit = math.ldexp(1, e - 40)
else
  unit = math.ldexp(1, -40)
end
-- Whether grants come out of one pool (what the clients hold is counted and clamped):
-- proportional share, fair share, reserved plus shared. Under `none` and `static` nothing is
-- counted (their grants may be far over the capacity); a table that changes between the two
-- kinds is counted anew.
local pooled = kind >= 2

-- What a record counts for, in units: what its client may be using, rounded up, and at most
-- one unit over the whole capacity (which already leaves nobody else anything: the count
-- stays a finite integer whatever a grant under another algorithm was).
local function units(x)
  if not pooled then return 0 end
  return math.min(math.ceil(x / unit), math.floor(cap / unit) + 1)
end

local function fmt(x)
  return string.format('%.17g', x)
end

local function band_key(p)
  return key .. ':b' .. p
end

-- A client's record as stored, or nil when it is not one the script wrote (corrupted, or
-- written by something else): checked before anything uses it, so that no request fails
-- after writing part of its changes; a table holding one is counted anew without it, and
-- learns (what that client held is lost).
local function decode_record(raw)
  local ok, rec = pcall(cmsgpack.unpack, raw)
  if not ok or type(rec) ~= 'table' or not (finite(rec.e) and finite(rec.h) and rec.h >= 0
      and finite(rec.w) and rec.w >= 0 and finite(rec.s) and rec.s >= 1 and finite(rec.p)
      and rec.p >= 0 and (rec.cd == 0 or rec.cd == 1) and finite(rec.cr)
      and rec.cr >= 0 and type(rec.held) == 'table') then
    return nil
  end
  for _, g in ipairs(rec.held) do
    if type(g) ~= 'table' or not (finite(g[1]) and finite(g[2])) then return nil end
  end
  return rec
end

local state = redis.call('HMGET', key, 'born', 'agg', 'c:' .. id, 'run')
local born = tonumber(state[1]) or now
local run = ARGV[4] or ''
do
  local info = redis.call('INFO', 'replication')
  run = run .. '/' .. (string.match(info, 'master_replid:(%w+)') or '')
end
-- Another server than the one that wrote the table (a restart that kept its data, a replica
-- promoted): it may have lost grants its clients use. It learns for the learning period, as
-- a table made anew does: it hands out only what clients report holding.
local other_server = run ~= '' and state[4] ~= false and state[4] ~= run
if other_server then born = now end
-- Set when a record was found corrupt and dropped: what its client held is not known, so
-- the table learns anew, as after lost writes.
local relearn = false
local agg
if state[2] then
  local ok, decoded = pcall(cmsgpack.unpack, state[2])
  if ok then agg = decoded end
  if type(agg) == 'table' and type(agg.u) == 'number' and cap / agg.u < 2 ^ 51
      and cap / agg.u >= 2 ^ 30 then
    unit = agg.u
  end
end

-- A band's sums (made when first needed).
-- Whether a key may have been made in this call (its expiry must be set now).
local fresh = false

local function band(p)
  local b = agg.b['p' .. p]
  if not b then
    fresh = true
    b = { W = 0, T = 0, n = 0, t = 0, s = 0, a = 0, p = p }
    agg.b['p' .. p] = b
  end
  return b
end

-- A demand's member in its band's set: its wants and subclients (read back when it crosses
-- the split), then its client.
local function member(rec, client)
  return fmt(rec.w) .. '|' .. rec.s .. '|' .. client
end

local function add_demand(rec, client)
  local b = band(rec.p)
  local r = rec.w / rec.s
  b.W = b.W + rec.w
  b.T = b.T + rec.s
  b.n = b.n + 1
  if r <= b.t then b.s = b.s + rec.w else b.a = b.a + rec.s end
  redis.call('ZADD', band_key(rec.p), fmt(r), member(rec, client))
  rec.cd = 1
end

local function remove_demand(rec, client)
  local b = band(rec.p)
  local r = rec.w / rec.s
  b.n = b.n - 1
  redis.call('ZREM', band_key(rec.p), member(rec, client))
  rec.cd = 0
  if b.n == 0 then
    -- Its sums are reset (no drift outlives a band).
    agg.b['p' .. rec.p] = nil
    redis.call('DEL', band_key(rec.p))
    return
  end
  b.W = b.W - rec.w
  b.T = b.T - rec.s
  if r <= b.t then b.s = b.s - rec.w else b.a = b.a - rec.s end
end

-- The grants a record's client may still be using at `now`: its grant while its lease runs,
-- and any earlier grant whose lease runs.
local function reserved(rec)
  local most = 0
  if rec.e > now then most = rec.h end
  for _, g in ipairs(rec.held) do
    if g[2] > now and g[1] > most then most = g[1] end
  end
  return most
end

-- The grants still running, without the covered ones (a grant at least as large running
-- longer covers a smaller one): `still_running` in the core.
local function still_running(grants)
  local live = {}
  for _, g in ipairs(grants) do
    if g[2] > now and g[1] > 0 then live[#live + 1] = g end
  end
  table.sort(live, function(x, y) return x[2] > y[2] end)
  local kept = {}
  for _, g in ipairs(live) do
    local larger = true
    for _, k in ipairs(kept) do
      if g[1] <= k[1] then larger = false break end
    end
    if larger then kept[#kept + 1] = g end
  end
  return kept
end

-- When a record next changes: its lease's end or an earlier grant's (nil: never again).
local function next_deadline(rec)
  local soonest
  if rec.e > now and (rec.cd == 1 or rec.h > 0) then soonest = rec.e end
  for _, g in ipairs(rec.held) do
    if g[2] > now and (soonest == nil or g[2] < soonest) then soonest = g[2] end
  end
  return soonest
end

-- Brings a record to `now`: its demand out once its lease ended, what it holds recounted
-- (in units, rounded up). Whether it still counts for anything.
local function bring(rec, client)
  if rec.cd == 1 and rec.e <= now then remove_demand(rec, client) end
  rec.held = still_running(rec.held)
  local held = units(reserved(rec))
  agg.R = agg.R + held - rec.cr
  rec.cr = held
  return rec.cd == 1 or held > 0
end

-- Stores a record brought to `now` (or drops it when it counts for nothing).
local function keep(rec, client, counts)
  local due = counts and next_deadline(rec)
  if due then
    redis.call('HSET', key, 'c:' .. client, cmsgpack.pack(rec))
    redis.call('ZADD', deadlines, due, client)
  else
    redis.call('HDEL', key, 'c:' .. client)
    redis.call('ZREM', deadlines, client)
    agg.nr = agg.nr - 1
  end
end

-- The sums made anew from the records: the first request, a table whose sums were lost or
-- disagree with its deadlines, or a capacity of another binary order (another unit).
local function rebuild()
  if type(agg) == 'table' and type(agg.b) == 'table' then
    for _, b in pairs(agg.b) do
      if type(b) == 'table' and b.p then redis.call('DEL', band_key(b.p)) end
    end
  end
  redis.call('DEL', deadlines)
  agg = { u = unit, pooled = pooled, R = 0, nr = 0, b = {} }
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 2) == 'c:' then
      local client = string.sub(f, 3)
      local rec = decode_record(all[i + 1])
      if rec then
        agg.nr = agg.nr + 1
        rec.cd = 0
        rec.cr = 0
        if rec.e > now then add_demand(rec, client) end
        keep(rec, client, bring(rec, client))
      else
        redis.call('HDEL', key, f)
        if pooled then
          -- What its client held is not known: the table learns until any grant it may
          -- still use has ended (a lease and the margin), or longer if it learned already.
          born, relearn = math.max(born, now - terms.n + terms.l + terms.m), true
        end
      end
    end
  end
end

local function damaged()
  if type(agg) ~= 'table' or type(agg.b) ~= 'table' or agg.u ~= unit
      or agg.pooled ~= pooled then
    return true
  end
  -- What the clients hold together: an exact count (an integer under 2^52, which pooled
  -- grants never reach: together they stay under the capacity's 2^51 units) or counted anew.
  if not finite(agg.R) or agg.R < 0 or agg.R >= 2 ^ 52 or not finite(agg.nr)
      or (agg.x ~= nil and not finite(agg.x)) then
    return true
  end
  -- A band's sums are numbers (not NaN; wants under `none` or `static` are not clamped, and
  -- their sums may be infinite), named by its priority.
  local function number(x) return type(x) == 'number' and x == x end
  for k, b in pairs(agg.b) do
    if type(b) ~= 'table' or not (finite(b.p) and k == 'p' .. b.p and number(b.W)
        and number(b.T) and finite(b.n) and number(b.t) and number(b.s) and number(b.a)) then
      return true
    end
  end
  -- The requester's own record, read before any write.
  if state[3] and not decode_record(state[3]) then return true end
  local counted = redis.call('ZCARD', deadlines)
  -- An empty set is no key: the next member makes it anew.
  if counted == 0 then fresh = true end
  if counted ~= agg.nr then return true end
  local b = agg.b['p' .. req.p]
  return b ~= nil and redis.call('ZCARD', band_key(req.p)) ~= b.n
end

if damaged() then
  fresh = true
  rebuild()
  state[3] = redis.call('HGET', key, 'c:' .. id)
end

-- Clients whose lease or earlier grant ended, a few per request, soonest first.
local due = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now, 'LIMIT', 0, LAPSES + 1)
local done = 0
for _, client in ipairs(due) do
  if client ~= id and done < LAPSES then
    done = done + 1
    local raw = redis.call('HGET', key, 'c:' .. client)
    local rec = raw and decode_record(raw)
    if rec then
      keep(rec, client, bring(rec, client))
    elseif raw then
      -- Not a record: the table is counted anew from the others (which brings every one of
      -- them to now, so the lapses are done).
      fresh = true
      rebuild()
      state[3] = redis.call('HGET', key, 'c:' .. id)
      break
    else
      redis.call('ZREM', deadlines, client)
    end
  end
end

-- Saves the table's sums, when it learns from (made now, another server, a record dropped)
-- and which server wrote it, on every path (releases included), and pushes the keys' expiry
-- back to twice a lease, the learning period and the margin from now when a key may be new
-- or half of that has passed since the last push (at least a lease and the margin after any
-- call, so every key outlives every grant made in it).
local function save_table()
  if not state[1] then fresh = true end
  if not state[1] or other_server or relearn then redis.call('HSET', key, 'born', born) end
  if run ~= '' and state[4] ~= run then redis.call('HSET', key, 'run', run) end
  local ttl = 2 * terms.l + terms.n + terms.m
  local push = fresh or test_clock or now + ttl / 2 >= (agg.x or 0)
  if push then agg.x = now + ttl end
  -- The hash first: a table made by this call exists before its expiry is set.
  redis.call('HSET', key, 'agg', cmsgpack.pack(agg))
  if push then
    redis.call('PEXPIRE', key, ttl)
    redis.call('PEXPIRE', deadlines, ttl)
    for _, b in pairs(agg.b) do redis.call('PEXPIRE', band_key(b.p), ttl) end
  end
end

-- This client: its old demand out, its new one in.
local old
if state[3] then
  old = decode_record(state[3])
  bring(old, id)
  if old.cd == 1 then remove_demand(old, id) end
  if req.x then
    -- A release: the client uses nothing from now on (its record and what it held go).
    agg.R = agg.R - old.cr
    keep(old, id, false)
    save_table()
    return cmsgpack.pack({ g = 0, n = 0, l = false, x = true })
  end
elseif req.x then
  save_table()
  return cmsgpack.pack({ g = 0, n = 0, l = false, x = false })
else
  old = { h = 0, e = 0, held = {}, cd = 0, cr = 0 }
  agg.nr = agg.nr + 1
end
local wants = req.w
-- Wants above the whole capacity count as the capacity (a pooled grant never exceeds it).
if kind >= 2 and wants > cap then wants = cap end
local rec = { w = wants, s = req.s, p = req.p, e = now + terms.l + terms.m, h = 0, cd = 0,
  cr = old.cr }
add_demand(rec, id)

-- The water level in `b` over `c` with its members split as they are.
local function level(b, c)
  if b.a <= 0 then
    -- Nobody over the split: their wants fit (within rounding), or the split must move.
    if b.s > c * (1 + 1e-12) then return -math.huge end
    return math.huge
  end
  return (c - b.s) / b.a
end

local function parse(m)
  local w, s = string.match(m, '^([^|]*)|([^|]*)|')
  return tonumber(w), tonumber(s)
end

-- Water-filling in `b` over `c`: moves the split to the level, and returns the level. The
-- split is kept at a member's ratio (the largest at or under it), so that `r <= b.t` says
-- exactly which side each member's wants and subclients are counted on whatever the
-- rounding of the level; the members of one ratio cross together.
local function fill(b, c)
  local bk = band_key(b.p)
  local from = fmt(b.t)
  local t = b.t
  local L = level(b, c)
  -- Members at or under the split that are over the level cross over it, largest first.
  local moved, group, done = 0, nil, false
  while not done do
    local got = redis.call('ZREVRANGEBYSCORE', bk, from, '-inf', 'WITHSCORES', 'LIMIT', moved, BATCH)
    for i = 1, #got, 2 do
      local r = tonumber(got[i + 1])
      if r <= L and r ~= group then
        t = r
        done = true
        break
      end
      local w, s = parse(got[i])
      b.s = b.s - w
      b.a = b.a + s
      moved, group = moved + 1, r
      L = level(b, c)
    end
    if not done and #got < 2 * BATCH then
      done = true
      -- Everyone crossed: nobody at or under the split (ratios are never negative).
      if moved > 0 then t = -1 end
    end
  end
  -- Or members over the split under the level cross under it, smallest first.
  if moved == 0 then
    done, group = false, nil
    while not done do
      local got = redis.call('ZRANGEBYSCORE', bk, '(' .. from, '+inf', 'WITHSCORES', 'LIMIT', moved, BATCH)
      for i = 1, #got, 2 do
        local r = tonumber(got[i + 1])
        if r > L and r ~= group then
          done = true
          break
        end
        local w, s = parse(got[i])
        b.s = b.s + w
        b.a = b.a - s
        moved, group, t = moved + 1, r, r
        L = level(b, c)
      end
      if #got < 2 * BATCH then done = true end
    end
  end
  b.t = t
  return L
end

-- Moves `b`'s split to `t` (every member between crosses).
local function split_at(b, t)
  local bk = band_key(b.p)
  local lo, hi, sign
  if t > b.t then lo, hi, sign = b.t, t, 1 elseif t < b.t then lo, hi, sign = t, b.t, -1 else return end
  local off = 0
  while true do
    local got = redis.call('ZRANGEBYSCORE', bk, '(' .. fmt(lo), fmt(hi), 'WITHSCORES', 'LIMIT', off, BATCH)
    for i = 1, #got, 2 do
      local w, s = parse(got[i])
      b.s = b.s + sign * w
      b.a = b.a - sign * s
    end
    off = off + #got / 2
    if #got < 2 * BATCH then break end
  end
  b.t = t
end

local learning = now < born + terms.n
local target
if learning then
  target = math.min(req.h, req.w)
elseif kind == 0 then
  target = req.w
elseif kind == 1 then
  target = math.min(req.w, cap)
else
  -- This band's capacity: what the higher bands leave.
  local c = cap
  for _, b in pairs(agg.b) do
    if b.p > rec.p then c = c - b.W end
  end
  if c < 0 then c = 0 end
  local b = band(rec.p)
  if b.W <= c then
    target = rec.w
  elseif kind == 2 then
    local eq = c / b.T
    split_at(b, eq)
    local base = math.min(rec.w, eq * rec.s)
    local sum = b.s + eq * b.a
    local left, excess = c - sum, b.W - sum
    target = base
    if excess > 0 and left > 0 and rec.w > base then
      target = math.min(rec.w, base + left * ((rec.w - base) / excess))
    end
  else
    target = math.min(rec.w, fill(b, c) * rec.s)
  end
end
if target ~= target or target < 0 then target = 0 end

-- The clamp: at most the capacity less what every other client may be using.
local grant
if kind == 0 then
  grant = target
elseif kind == 1 then
  grant = math.min(target, cap)
else
  local free = math.floor(cap / unit) - (agg.R - old.cr)
  grant = math.min(math.floor(target / unit), free)
  if grant < 0 then grant = 0 end
  grant = grant * unit
end

-- What it held stays reserved while its old leases run.
local earlier = old.held
earlier[#earlier + 1] = { old.h, old.e }
rec.held = still_running(earlier)
rec.h = grant
local held = units(reserved(rec))
agg.R = agg.R + held - old.cr
rec.cr = held
keep(rec, id, true)

save_table()
local clients = 0
for _, b in pairs(agg.b) do clients = clients + b.n end
return cmsgpack.pack({ g = grant, n = clients, l = learning })
