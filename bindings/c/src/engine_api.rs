//! The admission engine over the C ABI.

use std::ffi::c_char;
use std::sync::{Arc, Mutex};

use velvet_rope_cluster::Syncer;

use engine::{Config, Decision, Engine, Outcome, TicketError};

use crate::error::{
    free_handle, guard, null, vr_result, Failure, VR_BUFFER_TOO_SMALL, VR_INVALID_ARGUMENT,
    VR_INVALID_CONFIG,
};
use crate::strings::{bytes, c_text, text, write};

/// An admission engine (opaque). Create with `vr_engine_new*`, free with [`vr_engine_free`].
/// Thread-safe: every function taking a `const vr_engine *` may be called from any thread.
pub struct vr_engine {
    engine: Arc<Engine>,
    /// The cluster tier's sync loop, once [`vr_engine_cluster_start`] started it.
    sync: Mutex<Option<Syncer>>,
}

/// A rendered waiting page (opaque). Read it with [`vr_page_get_view`], free it with
/// [`vr_page_free`].
pub struct vr_page {
    page: engine::Page,
}

/// Capacity of [`vr_decision::set_cookie`], NUL included: the longest `Set-Cookie` value an
/// engine hands out (the configuration bounds every part of it) plus the NUL.
pub const VR_SET_COOKIE_CAPACITY: usize = 1024;

const _: () = assert!(VR_SET_COOKIE_CAPACITY == engine::MAX_SET_COOKIE_LEN + 1);

/// `vr_decision.outcome`: pass the request to the origin.
pub const VR_OUTCOME_ADMIT: u32 = 0;
/// `vr_decision.outcome`: serve the waiting page.
pub const VR_OUTCOME_QUEUE: u32 = 1;
/// `vr_decision.outcome`: refuse with Retry-After.
pub const VR_OUTCOME_REJECT: u32 = 2;

/// The engine's answer for one request. Plain data, owned by the caller (no free).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct vr_decision {
    /// `VR_OUTCOME_ADMIT`, `VR_OUTCOME_QUEUE` or `VR_OUTCOME_REJECT`.
    pub outcome: u32,
    /// -1 when the incoming ticket (if any) was fine; else why it was refused: 0 bad_encoding,
    /// 1 unknown_key, 2 bad_tag, 3 wrong_room, 4 expired, 5 from_future, 6 revoked.
    pub ticket_error: i32,
    /// Queue: live waiters ahead plus one; 0 otherwise.
    pub position: u64,
    /// Queue: estimated seconds to admission; 0 otherwise.
    pub estimated_wait_secs: u64,
    /// Queue: seconds until the page should refresh. Reject: seconds until a retry. Else 0.
    pub retry_after_secs: u64,
    /// Queue: live waiters in the room; 0 otherwise.
    pub queue_length: u64,
    /// Length of `set_cookie`; 0 when no cookie is to be set.
    pub set_cookie_len: usize,
    /// A complete `Set-Cookie` header value, NUL-terminated.
    pub set_cookie: [c_char; VR_SET_COOKIE_CAPACITY],
    /// The index of the room's rule that matched the request; -1 for none (and for
    /// `vr_engine_admit`, which reads no rules).
    pub rule: i32,
    /// 1: a `bypass` rule matched; pass the request untouched.
    pub bypassed: u8,
    /// 1: the room takes tickets from the `Velvet-Rope-Ticket` header; send a new ticket
    /// (the value of `set_cookie`) back in that response header too.
    pub ticket_header: u8,
    /// A dry run or a `count_only` rule passed the request (`outcome` is admit): what the
    /// outcome would have been (`VR_OUTCOME_QUEUE` or `VR_OUTCOME_REJECT`); -1 otherwise.
    pub would_have: i32,
    /// 1: refused (`VR_OUTCOME_REJECT`, a 400 page) because the request might belong to two
    /// rooms or more that would each decide it (a target that reads several ways, hosts that
    /// disagree, a host that is not one, or none; `vr_engine_decide_request` only). It lies
    /// where earlier headers had padding: a caller that fills a `vr_decision` itself (for
    /// `vr_engine_render_page`) should zero it first (`memset`).
    pub ambiguous: u8,
}

/// A page's parts; pointers stay valid until the page is freed.
#[repr(C)]
pub struct vr_page_view {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type` value (not NUL-terminated).
    pub content_type: *const c_char,
    /// Its length.
    pub content_type_len: usize,
    /// The body.
    pub body: *const u8,
    /// Its length.
    pub body_len: usize,
    /// Seconds for a `Refresh` header; 0 = none.
    pub refresh_secs: u64,
    /// Seconds for a `Retry-After` header; 0 = none.
    pub retry_after_secs: u64,
}

/// Room statistics as of the last tick.
#[repr(C)]
pub struct vr_room_stats {
    /// Visitors active within the session window.
    pub active_users: u64,
    /// First admissions in the current minute.
    pub admitted_this_minute: u64,
    /// First admissions since the room was created.
    pub admitted_total: u64,
    /// Live waiters.
    pub queue_length: u64,
    /// Arrival bucket up to which waiters may enter.
    pub frontier: u64,
    /// Slots free until the next tick.
    pub free_slots: u64,
    /// Ticket refusals by reason code (index = `ticket_error` value).
    pub ticket_rejections: [u64; 7],
}

// One slot per reason a ticket is refused for.
const _: () = assert!(TicketError::ALL.len() == 7);

/// Writes `d` through `out`. Checked first, then written: nothing is written on failure. Only
/// the bytes of the cookie that are used (and its NUL) are written, not the whole buffer. The
/// check cannot fail for a decision of an engine (its cookies fit by construction, so a
/// decision that counted a visitor is always delivered); it stays as the boundary's guarantee.
///
/// # Safety
/// `out` must be valid for writes of a `vr_decision`.
pub(crate) unsafe fn to_c(d: &Decision, out: *mut vr_decision) -> Result<(), Failure> {
    let cookie = d.set_cookie.as_deref().unwrap_or("");
    if cookie.len() >= VR_SET_COOKIE_CAPACITY {
        return Err(Failure(
            VR_BUFFER_TOO_SMALL,
            format!("Set-Cookie value of {} bytes does not fit", cookie.len()),
        ));
    }
    // SAFETY: `out` is valid for writes (caller); fields are written through raw pointers so
    // that no reference to possibly uninitialised memory is made; the cookie bytes plus NUL
    // fit the buffer (checked above).
    unsafe {
        std::ptr::addr_of_mut!((*out).outcome).write(d.outcome as u32);
        std::ptr::addr_of_mut!((*out).ticket_error).write(d.ticket_error.map_or(-1, |e| e as i32));
        std::ptr::addr_of_mut!((*out).position).write(d.position.unwrap_or(0));
        std::ptr::addr_of_mut!((*out).estimated_wait_secs)
            .write(d.estimated_wait_secs.unwrap_or(0));
        std::ptr::addr_of_mut!((*out).retry_after_secs).write(d.retry_after_secs.unwrap_or(0));
        std::ptr::addr_of_mut!((*out).queue_length).write(d.queue_length.unwrap_or(0));
        std::ptr::addr_of_mut!((*out).set_cookie_len).write(cookie.len());
        let buf = std::ptr::addr_of_mut!((*out).set_cookie).cast::<u8>();
        if !cookie.is_empty() {
            // Most decisions set no cookie: no call into libc's memcpy for those.
            std::ptr::copy_nonoverlapping(cookie.as_ptr(), buf, cookie.len());
        }
        buf.add(cookie.len()).write(0);
        std::ptr::addr_of_mut!((*out).rule).write(d.rule.map_or(-1, i32::from));
        std::ptr::addr_of_mut!((*out).bypassed).write(u8::from(d.bypassed));
        std::ptr::addr_of_mut!((*out).ticket_header).write(u8::from(d.ticket_header));
        std::ptr::addr_of_mut!((*out).would_have).write(d.would_have.map_or(-1, |o| o as i32));
        std::ptr::addr_of_mut!((*out).ambiguous).write(u8::from(d.ambiguous));
    }
    Ok(())
}

/// `now_ms` as the engine takes it: times past [`engine::MAX_NOW_MS`] (2106) are refused, most
/// likely microseconds passed for milliseconds.
pub(crate) fn checked_now(now_ms: u64) -> Result<u64, Failure> {
    if now_ms > engine::MAX_NOW_MS {
        return Err(bad_now(now_ms));
    }
    Ok(now_ms)
}

#[cold]
#[inline(never)]
fn bad_now(now_ms: u64) -> Failure {
    Failure(
        VR_INVALID_ARGUMENT,
        format!("now_ms {now_ms} lies past 2106: milliseconds since the Unix epoch are due"),
    )
}

fn from_c(d: &vr_decision) -> Result<Decision, Failure> {
    let outcome = match d.outcome {
        VR_OUTCOME_ADMIT => Outcome::Admit,
        VR_OUTCOME_QUEUE => Outcome::Queue,
        VR_OUTCOME_REJECT => Outcome::Reject,
        n => {
            return Err(Failure(
                VR_INVALID_ARGUMENT,
                format!("outcome {n} is not 0, 1 or 2"),
            ))
        }
    };
    let some = |v: u64| (v != 0).then_some(v);
    // The cookie travels with the decision: a room taking header tickets puts its ticket in
    // the JSON page.
    let len = d.set_cookie_len.min(VR_SET_COOKIE_CAPACITY - 1);
    let cookie: Vec<u8> = d.set_cookie[..len].iter().map(|&c| c as u8).collect();
    Ok(Decision {
        outcome,
        set_cookie: (len > 0).then(|| String::from_utf8(cookie).ok()).flatten(),
        position: some(d.position),
        estimated_wait_secs: (outcome == Outcome::Queue).then_some(d.estimated_wait_secs),
        retry_after_secs: some(d.retry_after_secs),
        queue_length: (outcome == Outcome::Queue).then_some(d.queue_length),
        ticket_error: usize::try_from(d.ticket_error)
            .ok()
            .and_then(|i| TicketError::ALL.get(i).copied()),
        rule: u16::try_from(d.rule).ok(),
        bypassed: d.bypassed != 0,
        would_have: match d.would_have {
            1 => Some(Outcome::Queue),
            2 => Some(Outcome::Reject),
            _ => None,
        },
        ticket_header: d.ticket_header != 0,
        ambiguous: d.ambiguous != 0 && outcome == Outcome::Reject,
    })
}

/// Frees what `out` owns on success: nothing to do on failure (out-pointers are only written
/// on success).
fn boxed(engine: Engine) -> *mut vr_engine {
    Box::into_raw(Box::new(vr_engine {
        engine: Arc::new(engine),
        sync: Mutex::new(None),
    }))
}

/// Creates an engine from configuration text (TOML, or JSON starting with `{`).
/// On success `*engine_out` owns a new engine: free it with [`vr_engine_free`].
///
/// # Safety
/// `config` must be valid for reads of `config_len` bytes; `engine_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_new(
    config: *const c_char,
    config_len: usize,
    now_ms: u64,
    engine_out: *mut *mut vr_engine,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let text = unsafe { text(config, config_len, "config") }?;
        if engine_out.is_null() {
            return Err(null("engine_out"));
        }
        let e = Engine::from_text(text, now_ms)?;
        // SAFETY: checked non-null; writable per the contract.
        unsafe { write(engine_out, boxed(e), "engine_out") }
    })
}

/// Creates an engine from a configuration file (NUL-terminated path; `.json` or TOML).
/// Ownership as for [`vr_engine_new`].
///
/// # Safety
/// `path` must be a NUL-terminated string; `engine_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_new_from_file(
    path: *const c_char,
    now_ms: u64,
    engine_out: *mut *mut vr_engine,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { c_text(path, "path") }?;
        if engine_out.is_null() {
            return Err(null("engine_out"));
        }
        let e = Engine::from_path(path, now_ms)?;
        // SAFETY: checked non-null.
        unsafe { write(engine_out, boxed(e), "engine_out") }
    })
}

/// Bytes of shared memory an engine for this configuration needs ([`vr_engine_new_shared`]).
///
/// # Safety
/// `config` readable for `config_len` bytes; `size_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_shared_region_size(
    config: *const c_char,
    config_len: usize,
    size_out: *mut usize,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let text = unsafe { text(config, config_len, "config") }?;
        let cfg = Config::from_text(text)?;
        // SAFETY: per this function's contract.
        unsafe { write(size_out, Engine::shared_region_size(&cfg), "size_out") }
    })
}

/// Creates an engine whose counters live in `region`, shared with every other engine (in any
/// process) over the same memory: a zeroed region is initialised, one initialised for the same
/// configuration layout is attached (counts kept), anything else is refused with
/// `VR_REGION_REFUSED`. Ownership of the engine as for [`vr_engine_new`]; the region stays the
/// caller's and must outlive the engine.
///
/// # Safety
/// `region` must be valid for reads and writes of `region_len` bytes, 128-byte aligned, mapped
/// for the whole life of the engine, and touched by nothing but velvet-rope engines.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_new_shared(
    config: *const c_char,
    config_len: usize,
    now_ms: u64,
    region: *mut u8,
    region_len: usize,
    engine_out: *mut *mut vr_engine,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let text = unsafe { text(config, config_len, "config") }?;
        if region.is_null() {
            return Err(null("region"));
        }
        if engine_out.is_null() {
            return Err(null("engine_out"));
        }
        let cfg = Config::from_text(text)?;
        // SAFETY: forwarded from this function's contract.
        let e = unsafe { Engine::new_shared(cfg, now_ms, region, region_len) }?;
        // SAFETY: checked non-null.
        unsafe { write(engine_out, boxed(e), "engine_out") }
    })
}

/// Creates an engine whose counters live in the *state file* at `path` (NUL-terminated),
/// mapped into every process that opens it: the workers of a pre-fork server share exact
/// counts, and counts, queue and the ephemeral ticket key survive restarts. The file is
/// created (mode 0600) if missing. Ownership as for [`vr_engine_new`]; the engine owns the
/// mapping.
///
/// # Safety
/// `config` readable for `config_len` bytes; `path` a NUL-terminated string; `engine_out`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_open_state_file(
    config: *const c_char,
    config_len: usize,
    path: *const c_char,
    now_ms: u64,
    engine_out: *mut *mut vr_engine,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let text = unsafe { text(config, config_len, "config") }?;
        // SAFETY: per this function's contract.
        let path = unsafe { c_text(path, "path") }?;
        if engine_out.is_null() {
            return Err(null("engine_out"));
        }
        let e = Engine::open_state_file(Config::from_text(text)?, path, now_ms)?;
        // SAFETY: checked non-null.
        unsafe { write(engine_out, boxed(e), "engine_out") }
    })
}

/// Frees an engine. NULL is ignored. Not while other threads still use it.
///
/// # Safety
/// `engine` must be NULL or a pointer from `vr_engine_new*` not freed before.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_free(engine: *mut vr_engine) {
    // SAFETY: forwarded from this function's contract.
    unsafe { free_handle(engine) }
}

/// Borrows the engine behind a handle.
///
/// # Safety
/// `engine` must be NULL or a live handle.
pub(crate) unsafe fn engine_ref<'a>(engine: *const vr_engine) -> Result<&'a Engine, Failure> {
    // SAFETY: per the caller.
    unsafe { engine.as_ref() }
        .map(|e| &*e.engine)
        .ok_or_else(|| null("engine"))
}

/// The cluster tier's sync loop, as [`vr_engine_cluster_status`] reports it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct vr_cluster_status {
    /// 1 when this process runs a sync loop for the engine, else 0.
    pub running: u32,
    /// 1 while the store does not answer (the engine decides on its last allowances, then on
    /// the fallback share), else 0.
    pub in_outage: u32,
    /// Syncs of a room that got an answer.
    pub syncs: u64,
    /// Syncs of a room that failed.
    pub failures: u64,
    /// Runs of failures (each logged once).
    pub outages: u64,
    /// Hosts holding a lease at the last answer.
    pub hosts: u64,
}

/// Starts the cluster tier's sync loop for an engine whose configuration has a `[cluster]`
/// table: a thread of this process that, once per `sync_interval_ms`, reports the rooms to the
/// store and hands the engine its allowances (one process of those sharing the engine's
/// counters syncs per interval; the others only tick). Requests never wait for it. Call it in
/// each process that serves requests, after any fork (nginx: in each worker). A no-op without
/// a `[cluster]` table, or when the loop runs already. It stops when the engine is freed.
/// Outages are logged to standard error, once each.
///
/// # Safety
/// `engine` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_cluster_start(engine: *const vr_engine) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let handle = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        let mut sync = handle.sync.lock().unwrap_or_else(|p| p.into_inner());
        if sync.is_none() {
            *sync = Syncer::from_engine(handle.engine.clone())
                .map_err(|e| Failure(VR_INVALID_CONFIG, format!("cluster: {e}")))?;
        }
        Ok(())
    })
}

/// Writes the state of the engine's sync loop in this process to `*status_out`.
///
/// # Safety
/// `engine` must be a live handle; `status_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_cluster_status(
    engine: *const vr_engine,
    status_out: *mut vr_cluster_status,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let handle = unsafe { engine.as_ref() }.ok_or_else(|| null("engine"))?;
        if status_out.is_null() {
            return Err(null("status_out"));
        }
        let sync = handle.sync.lock().unwrap_or_else(|p| p.into_inner());
        let status = sync.as_ref().map_or_else(vr_cluster_status::default, |s| {
            let st = s.status();
            vr_cluster_status {
                running: 1,
                in_outage: u32::from(st.in_outage),
                syncs: st.syncs,
                failures: st.failures,
                outages: st.outages,
                hosts: st.hosts,
            }
        });
        // SAFETY: checked non-null; writable per the contract.
        unsafe { status_out.write(status) };
        Ok(())
    })
}

/// Decides one request. `cookie_header` is the request's whole `Cookie` header (NULL/0 when
/// absent; need not be UTF-8); `room` names the room. Writes `*decision_out` on success.
/// Thread-safe; never blocks.
///
/// # Safety
/// Pointers valid for their lengths; `decision_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_admit(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    cookie_header: *const c_char,
    cookie_header_len: usize,
    now_ms: u64,
    decision_out: *mut vr_decision,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract. The name is compared as bytes: a name that
        // is not UTF-8 is simply no room's.
        let room = unsafe { bytes(room, room_len, "room") }?;
        // SAFETY: per this function's contract.
        let header = unsafe { bytes(cookie_header, cookie_header_len, "cookie_header") }?;
        if decision_out.is_null() {
            return Err(null("decision_out"));
        }
        let now = checked_now(now_ms)?;
        let d = e.admit_header_bytes(room, (!header.is_empty()).then_some(header), now)?;
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { to_c(&d, decision_out) }
    })
}

/// Decides one request only if that hands the visitor nothing new: for a host that could not
/// deliver a new ticket, such as an nginx subrequest whose client response is already on its
/// way. A visitor holding a valid admission ticket of `room` is decided as by
/// `vr_engine_admit` (admitted; its count renewed if due: a renewed `set_cookie` that never
/// reaches the visitor is harmless); in a `passthrough` room every visitor passes, uncounted.
/// Writes `*decided_out`; `*decision_out` only when it is true. When false, nothing was
/// counted, claimed or queued: the visitor is not admitted to the room.
///
/// # Safety
/// Pointers valid for their lengths; `decided_out` and `decision_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_admit_holder(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    cookie_header: *const c_char,
    cookie_header_len: usize,
    now_ms: u64,
    decided_out: *mut bool,
    decision_out: *mut vr_decision,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract (a name that is not UTF-8 is no room's).
        let room = unsafe { bytes(room, room_len, "room") }?;
        // SAFETY: per this function's contract.
        let header = unsafe { bytes(cookie_header, cookie_header_len, "cookie_header") }?;
        if decided_out.is_null() {
            return Err(null("decided_out"));
        }
        if decision_out.is_null() {
            return Err(null("decision_out"));
        }
        let now = checked_now(now_ms)?;
        let d = e.admit_holder_bytes(room, (!header.is_empty()).then_some(header), now)?;
        if let Some(d) = &d {
            // SAFETY: checked non-null; writable per this function's contract.
            unsafe { to_c(d, decision_out) }?;
        }
        // SAFETY: checked non-null; writable per this function's contract.
        unsafe { decided_out.write(d.is_some()) };
        Ok(())
    })
}

/// Folds the counters into a new snapshot. Call about once a second; safe from any thread
/// and process at once (one advances, the others read what it published; none waits).
/// `VR_INVALID_ARGUMENT` for a `now_ms` past 2106 (microseconds passed for milliseconds).
///
/// # Safety
/// `engine` must be a live handle.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_tick(engine: *const vr_engine, now_ms: u64) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        e.tick(checked_now(now_ms)?);
        Ok(())
    })
}

/// Replaces the configuration with `config` text; on failure the running one keeps serving.
///
/// # Safety
/// `engine` live; `config` readable for `config_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_reload(
    engine: *const vr_engine,
    config: *const c_char,
    config_len: usize,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let text = unsafe { text(config, config_len, "config") }?;
        e.reload(Config::from_text(text)?)?;
        Ok(())
    })
}

/// Whether the configuration has a room of this name.
///
/// # Safety
/// `engine` live; `room` readable; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_has_room(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    out: *mut bool,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { text(room, room_len, "room") }?;
        let has = e.stats(room).is_ok();
        // SAFETY: per this function's contract.
        unsafe { write(out, has, "out") }
    })
}

/// A room's statistics as of the last tick.
///
/// # Safety
/// `engine` live; `room` readable; `stats_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_stats(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    stats_out: *mut vr_room_stats,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { text(room, room_len, "room") }?;
        let s = e.stats(room)?;
        let r = s.ticket_rejections;
        let stats = vr_room_stats {
            active_users: s.active_users,
            admitted_this_minute: s.admitted_this_minute,
            admitted_total: s.admitted_total,
            queue_length: s.queue_length,
            frontier: s.frontier,
            free_slots: s.free_slots,
            ticket_rejections: [
                r.bad_encoding,
                r.unknown_key,
                r.bad_tag,
                r.wrong_room,
                r.expired,
                r.from_future,
                r.revoked,
            ],
        };
        // SAFETY: per this function's contract.
        unsafe { write(stats_out, stats, "stats_out") }
    })
}

/// Every room's statistics as a JSON object, NUL-terminated, into `buf`. `*written_out` gets
/// the JSON's length (without the NUL); when `buf_len` is too small the result is
/// `VR_BUFFER_TOO_SMALL` and `*written_out` is the size needed (NUL included).
///
/// # Safety
/// `engine` live; `buf` NULL or writable for `buf_len` bytes; `written_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_stats_json(
    engine: *const vr_engine,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        unsafe { write_text(&e.stats_json(), "stats", buf, buf_len, written_out) }
    })
}

/// Every room's metrics in the OpenMetrics text format (what Prometheus scrapes; serve it as
/// `application/openmetrics-text; version=1.0.0; charset=utf-8`), ending with `# EOF` and
/// NUL-terminated, into `buf`. `*written_out` gets the text's length (without the NUL); when
/// `buf_len` is too small the result is `VR_BUFFER_TOO_SMALL` and `*written_out` is the size
/// needed (NUL included; the text of the next call may be a little longer, as counts grow).
///
/// # Safety
/// `engine` live; `buf` NULL or writable for `buf_len` bytes; `written_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_metrics(
    engine: *const vr_engine,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        unsafe { write_text(&e.metrics_text(), "metrics", buf, buf_len, written_out) }
    })
}

/// Whether a status request's `Accept` header (`accept_len` bytes; NULL when absent) asks
/// for the metrics' text rather than the JSON status: it names `application/openmetrics-text`
/// or `text/plain` (as Prometheus does) ahead of `application/json` (see
/// `velvet_rope::wants_metrics`). 1 or 0.
///
/// # Safety
/// `accept` NULL or readable for `accept_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn vr_wants_metrics(accept: *const c_char, accept_len: usize) -> u8 {
    if accept.is_null() {
        return 0;
    }
    // SAFETY: non-null and readable per this function's contract.
    let bytes = unsafe { std::slice::from_raw_parts(accept.cast::<u8>(), accept_len) };
    u8::from(engine::wants_metrics(Some(&String::from_utf8_lossy(bytes))))
}

/// Takes the oldest event the engine logged for the host (see `Engine::drain_events`: a
/// room's queue starting or stopping, a scheduled event's phases, a reload done or refused,
/// the cluster store lost or found) as one line of JSON, NUL-terminated, into `buf`, and
/// whether it calls for attention (a refusal, an outage) into `*warning_out` (1 or 0; NULL to
/// skip). `*written_out` is the line's length, 0 when there is no event (then `buf` holds an
/// empty string, if it has room for one). When `buf_len` is too small the result is
/// `VR_BUFFER_TOO_SMALL`, `*written_out` the size needed (NUL included), and the event stays
/// for the next call. Call it after `vr_engine_tick` until it writes nothing: never on a
/// request's path.
///
/// # Safety
/// `engine` live; `buf` NULL or writable for `buf_len` bytes; `written_out` writable;
/// `warning_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_next_event(
    engine: *const vr_engine,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
    warning_out: *mut u8,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        unsafe {
            next_event(
                |take| e.next_event_if(take),
                buf,
                buf_len,
                written_out,
                warning_out,
            )
        }
    })
}

/// The oldest event `pop_if` takes (it passes the event to the closure it is given, and takes
/// it if that returns true), into `buf` as `vr_engine_next_event` writes it.
///
/// # Safety
/// `buf` NULL or writable for `buf_len` bytes; `written_out` NULL or writable; `warning_out`
/// NULL or writable.
pub(crate) unsafe fn next_event(
    pop_if: impl FnOnce(
        &mut dyn FnMut(&engine::admission::Event) -> bool,
    ) -> Option<engine::admission::Event>,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
    warning_out: *mut u8,
) -> Result<(), Failure> {
    if written_out.is_null() {
        return Err(null("written_out"));
    }
    let room = if buf.is_null() { 0 } else { buf_len };
    let mut line = String::new();
    let taken = pop_if(&mut |ev| {
        line = ev.to_json();
        line.len() < room
    });
    let Some(ev) = taken else {
        if line.is_empty() {
            // SAFETY: `written_out` checked non-null; `buf`, if given with room, is
            // writable for at least one byte.
            unsafe {
                written_out.write(0);
                if room > 0 {
                    *buf = 0;
                }
            }
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { written_out.write(line.len() + 1) };
        return Err(Failure(
            VR_BUFFER_TOO_SMALL,
            format!("the event needs {} bytes, {buf_len} given", line.len() + 1),
        ));
    };
    if !warning_out.is_null() {
        // SAFETY: non-null and writable per the contract.
        unsafe { warning_out.write(u8::from(ev.kind.is_warning())) };
    }
    // SAFETY: `buf` has `room > line.len()` writable bytes; `written_out` is writable.
    unsafe { write_text(&line, "the event", buf, buf_len, written_out) }
}

/// Copies `text` and a NUL into `buf`, its length into `*written_out`; or, when it does not
/// fit, the size it needs into `*written_out` and `VR_BUFFER_TOO_SMALL` naming `what`.
///
/// # Safety
/// `buf` NULL or writable for `buf_len` bytes; `written_out` NULL or writable.
unsafe fn write_text(
    text: &str,
    what: &str,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
) -> Result<(), Failure> {
    if written_out.is_null() {
        return Err(null("written_out"));
    }
    if buf.is_null() || buf_len < text.len() + 1 {
        // SAFETY: checked non-null; writable per the contract.
        unsafe { written_out.write(text.len() + 1) };
        return Err(Failure(
            VR_BUFFER_TOO_SMALL,
            format!("{what} need {} bytes, {buf_len} given", text.len() + 1),
        ));
    }
    // SAFETY: `buf` has `buf_len > text.len()` writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
        written_out.write(text.len());
    }
    Ok(())
}

/// Renders the page for a queue or reject decision: `*page_out` owns a new page (free with
/// [`vr_page_free`]), or is set to NULL for an admit decision. `accept` is the request's
/// `Accept` header (NULL/0 when absent).
///
/// # Safety
/// `engine` live; strings readable; `decision` readable; `page_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_engine_render_page(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    decision: *const vr_decision,
    accept: *const c_char,
    accept_len: usize,
    page_out: *mut *mut vr_page,
) -> vr_result {
    let now_ms = engine::Clock::now_ms(&engine::SystemClock);
    // SAFETY: per this function's contract, which is `vr_engine_render_page_ex`'s with no
    // `Accept-Language`.
    unsafe {
        vr_engine_render_page_ex(
            engine,
            room,
            room_len,
            decision,
            accept,
            accept_len,
            std::ptr::null(),
            0,
            now_ms,
            page_out,
        )
    }
}

/// Renders the page for a queue or reject decision as [`vr_engine_render_page`] does, for a
/// request whose `Accept-Language` header is `accept_language` (NULL/0 when absent: in a
/// room with `accept_language = true` it picks the built-in page's language) at `now_ms`
/// (milliseconds since the Unix epoch: it picks the event in force and its countdown).
/// Headers that are not UTF-8 count as absent.
///
/// # Safety
/// `engine` live; strings readable; `decision` readable; `page_out` writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vr_engine_render_page_ex(
    engine: *const vr_engine,
    room: *const c_char,
    room_len: usize,
    decision: *const vr_decision,
    accept: *const c_char,
    accept_len: usize,
    accept_language: *const c_char,
    accept_language_len: usize,
    now_ms: u64,
    page_out: *mut *mut vr_page,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let e = unsafe { engine_ref(engine) }?;
        // SAFETY: per this function's contract.
        let room = unsafe { text(room, room_len, "room") }?;
        // SAFETY: per this function's contract.
        let d = unsafe { decision.as_ref() }.ok_or_else(|| null("decision"))?;
        // SAFETY: per this function's contract.
        let accept = unsafe { bytes(accept, accept_len, "accept") }?;
        // SAFETY: per this function's contract.
        let accept_language =
            unsafe { bytes(accept_language, accept_language_len, "accept_language") }?;
        if page_out.is_null() {
            return Err(null("page_out"));
        }
        let request = engine::PageRequest {
            accept: std::str::from_utf8(accept).ok().filter(|a| !a.is_empty()),
            accept_language: std::str::from_utf8(accept_language)
                .ok()
                .filter(|a| !a.is_empty()),
            now_ms,
            ticket: None,
        };
        let page = e
            .render_page_for(room, &from_c(d)?, &request)?
            .map_or(std::ptr::null_mut(), |page| {
                Box::into_raw(Box::new(vr_page { page }))
            });
        // SAFETY: checked non-null.
        unsafe { write(page_out, page, "page_out") }
    })
}

/// The parts of a page; the pointers in `*view_out` live as long as the page.
///
/// # Safety
/// `page` live; `view_out` writable.
#[no_mangle]
pub unsafe extern "C" fn vr_page_get_view(
    page: *const vr_page,
    view_out: *mut vr_page_view,
) -> vr_result {
    guard(|| {
        // SAFETY: per this function's contract.
        let p = &unsafe { page.as_ref() }.ok_or_else(|| null("page"))?.page;
        let view = vr_page_view {
            status: p.status,
            content_type: p.content_type.as_ptr().cast(),
            content_type_len: p.content_type.len(),
            body: p.body.as_ptr(),
            body_len: p.body.len(),
            refresh_secs: p.refresh_secs.unwrap_or(0),
            retry_after_secs: p.retry_after_secs.unwrap_or(0),
        };
        // SAFETY: per this function's contract.
        unsafe { write(view_out, view, "view_out") }
    })
}

/// Frees a page. NULL is ignored.
///
/// # Safety
/// `page` must be NULL or a page from [`vr_engine_render_page`] or
/// [`vr_engine_render_page_ex`] not freed before.
#[no_mangle]
pub unsafe extern "C" fn vr_page_free(page: *mut vr_page) {
    // SAFETY: forwarded from this function's contract.
    unsafe { free_handle(page) }
}
