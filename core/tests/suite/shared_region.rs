//! Engines over one shared region: the host tier (nginx workers, pre-fork servers).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;

use velvet_rope::{Config, Engine, Outcome};

const T0: u64 = 1_800_000_000_000;

fn config(total: u64) -> Config {
    Config::from_toml(&format!(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = {total}\nnew_users_per_minute = 100000\n\
         [rooms.cookie]\nsecure = false\n"
    ))
    .unwrap()
}

/// 128-byte aligned, zeroed memory standing in for a shared mapping.
struct Memory(Vec<u128>);

impl Memory {
    fn new(bytes: usize) -> Self {
        Self(vec![0u128; bytes.div_ceil(16) + 8])
    }
    fn ptr(&mut self) -> (*mut u8, usize) {
        let raw = self.0.as_mut_ptr() as *mut u8;
        let pad = raw.align_offset(128);
        // SAFETY: `pad < 128` and the buffer has 128 spare bytes.
        (unsafe { raw.add(pad) }, self.0.len() * 16 - pad)
    }
}

#[test]
fn two_engines_on_one_region_admit_exactly_the_limit() {
    let cfg = config(10);
    let size = Engine::shared_region_size(&cfg);
    let mut mem = Memory::new(size);
    let (ptr, len) = mem.ptr();
    // SAFETY: `mem` outlives both engines and nothing else touches it.
    let a = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    let barrier = Barrier::new(2);
    let admitted: usize = std::thread::scope(|s| {
        let hs: Vec<_> = [&a, &b]
            .into_iter()
            .map(|e| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    (0..15)
                        .filter(|_| e.admit("r", None, T0 + 1).unwrap().outcome == Outcome::Admit)
                        .count()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(admitted, 10, "30 arrivals on two engines, a limit of 10");
    // A ticket sealed by one engine opens in the other (the region's shared key).
    a.tick(T0 + 1000);
    b.tick(T0 + 1000);
    let c = a.admit("r", None, T0 + 1001).unwrap();
    assert_eq!(c.outcome, Outcome::Queue);
    assert_eq!(b.stats("r").unwrap().active_users, 10);
    assert_eq!(a.stats("r").unwrap().admitted_total, 10);
}

#[test]
fn tickets_cross_engines_and_counts_survive_a_new_engine() {
    let cfg = config(3);
    let mut mem = Memory::new(Engine::shared_region_size(&cfg));
    let (ptr, len) = mem.ptr();
    // SAFETY: `mem` outlives the engines.
    let a = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    let d = a.admit("r", None, T0).unwrap();
    let cookie = d.set_cookie.unwrap().split(';').next().unwrap().to_owned();
    a.admit("r", None, T0).unwrap();
    a.tick(T0 + 1000);
    drop(a);
    // A new engine over the same memory (a reloaded or restarted worker) keeps the counts.
    // SAFETY: as above.
    let b = unsafe { Engine::new_shared(cfg.clone(), T0 + 1000, ptr, len) }.unwrap();
    assert_eq!(b.stats("r").unwrap().active_users, 2);
    let again = b.admit("r", Some(&cookie), T0 + 1001).unwrap();
    assert_eq!((again.outcome, again.ticket_error), (Outcome::Admit, None));
    assert_eq!(
        b.admit("r", None, T0 + 1001).unwrap().outcome,
        Outcome::Admit
    );
    assert_eq!(
        b.admit("r", None, T0 + 1001).unwrap().outcome,
        Outcome::Queue
    );
}

#[test]
fn wrong_regions_are_refused() {
    let cfg = config(3);
    let size = Engine::shared_region_size(&cfg);
    let mut mem = Memory::new(size);
    let (ptr, len) = mem.ptr();
    // Too small: refused before the region is touched.
    // SAFETY: `mem` outlives every engine made here.
    let err = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, size - 128) }.unwrap_err();
    assert!(err.to_string().contains("needs"), "{err}");
    // SAFETY: as above.
    let _a = unsafe { Engine::new_shared(cfg.clone(), T0, ptr, len) }.unwrap();
    // Another limit: the same counters serve it (limits are not part of the layout).
    // SAFETY: as above.
    let _lower = unsafe { Engine::new_shared(config(2), T0, ptr, len) }.unwrap();
    // The same room with another numbering of its queue: refused, naming the setting.
    let mut other_refresh = cfg.clone();
    other_refresh.rooms[0].refresh_interval = 7;
    // SAFETY: as above.
    let err = unsafe { Engine::new_shared(other_refresh, T0, ptr, len) }.unwrap_err();
    assert!(err.to_string().contains("refresh_interval"), "{err}");
    // Another room of the same size: the region has no space left for it.
    let other = Config::from_toml(
        "[[rooms]]\nname = \"s\"\ntotal_active_users = 3\nnew_users_per_minute = 10\n",
    )
    .unwrap();
    assert_eq!(Engine::shared_region_size(&other), size);
    // SAFETY: as above.
    let err = unsafe { Engine::new_shared(other, T0, ptr, len) }.unwrap_err();
    assert!(err.to_string().contains("no room for `s`"), "{err}");
    // Not ours at all.
    let mut junk = Memory::new(size);
    let (jptr, jlen) = junk.ptr();
    // SAFETY: `junk` is ours; writing its first byte is fine.
    unsafe { *jptr = 0xAB };
    // SAFETY: as above.
    let err = unsafe { Engine::new_shared(cfg, T0, jptr, jlen) }.unwrap_err();
    assert!(err.to_string().contains("magic"), "{err}");
    // Misaligned.
    let cfg = config(3);
    // SAFETY: in bounds of `mem`.
    let err = unsafe { Engine::new_shared(cfg, T0, ptr.add(8), len - 8) }.unwrap_err();
    assert!(err.to_string().contains("aligned"), "{err}");
}

/// Real processes: this test re-runs its own binary as children that open the same state
/// file and, together, present crowds of new visitors while each of them ticks without pause
/// on a thread of its own (as nginx workers tick while requests arrive). Every crowd admits
/// exactly the limit. Each child is pinned to one CPU (as nginx's `worker_cpu_affinity` pins
/// workers) while the parent is not: processes that see different CPU counts still lay the
/// region out alike.
#[test]
fn separate_processes_share_exact_counts_while_ticking() {
    const CHILDREN: usize = 3;
    const EACH: usize = 40;
    const LIMIT: u64 = 50;
    const CROWDS: usize = 12;
    if let Ok(path) = std::env::var("VR_SHARED_CHILD") {
        let cpu: usize = std::env::var("VR_PIN_CPU").unwrap().parse().unwrap();
        let go: u128 = std::env::var("VR_GO_AT").unwrap().parse().unwrap();
        pin_to(cpu);
        let e = Engine::open_state_file(config(LIMIT), &path, T0).unwrap();
        let stop = AtomicBool::new(false);
        let ticks = AtomicUsize::new(0);
        let (n, during) = std::thread::scope(|s| {
            s.spawn(|| {
                let mut t = T0;
                while !stop.load(Ordering::Relaxed) {
                    t += 1;
                    e.tick(t);
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            });
            // The three processes start their crowds at one instant, tickers running.
            while unix_ms() < go || ticks.load(Ordering::Relaxed) == 0 {
                std::hint::spin_loop();
            }
            let before = ticks.load(Ordering::Relaxed);
            // Each child is pinned to one CPU with its ticker: yield between arrivals so that
            // this process's ticks, too, fall between them.
            let n = (0..EACH)
                .filter(|_| {
                    std::thread::yield_now();
                    e.admit("r", None, T0 + 1).unwrap().outcome == Outcome::Admit
                })
                .count();
            let during = ticks.load(Ordering::Relaxed) - before;
            stop.store(true, Ordering::Relaxed);
            (n, during)
        });
        println!("ADMITTED {n} TICKS {during}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("vr-shared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    // This test's name as the test binary knows it: its module's path without the crate's.
    let name = match module_path!().split_once("::") {
        Some((_, module)) => {
            format!("{module}::separate_processes_share_exact_counts_while_ticking")
        }
        None => "separate_processes_share_exact_counts_while_ticking".to_owned(),
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut ticks_during_crowds = 0;
    for crowd in 0..CROWDS {
        let path = dir.join(format!("region-{crowd}"));
        let children: Vec<_> = (0..CHILDREN)
            .map(|i| {
                std::process::Command::new(&exe)
                    .args(["--exact", &name, "--nocapture"])
                    .env("VR_SHARED_CHILD", &path)
                    .env("VR_PIN_CPU", (i % cpus).to_string())
                    .env("VR_GO_AT", (unix_ms() + 100).to_string())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let reports: Vec<(usize, usize)> = children
            .into_iter()
            .map(|c| {
                let out = c.wait_with_output().unwrap();
                assert!(out.status.success());
                let text = String::from_utf8_lossy(&out.stdout);
                let line = text
                    .lines()
                    .find(|l| l.starts_with("ADMITTED "))
                    .expect("child reported");
                let w: Vec<&str> = line.split_whitespace().collect();
                (w[1].parse().unwrap(), w[3].parse().unwrap())
            })
            .collect();
        let total: usize = reports.iter().map(|r| r.0).sum();
        ticks_during_crowds += reports.iter().map(|r| r.1).sum::<usize>();
        assert_eq!(
            total as u64,
            LIMIT,
            "crowd {crowd}: {} arrivals in {CHILDREN} processes",
            CHILDREN * EACH
        );
        let e = Engine::open_state_file(config(LIMIT), &path, T0 + 1000).unwrap();
        assert_eq!(e.stats("r").unwrap().admitted_total, LIMIT);
        assert_eq!(e.stats("r").unwrap().active_users, LIMIT);
    }
    assert!(
        ticks_during_crowds > 0,
        "ticks ran while the crowds were admitted"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Pins the calling thread to one CPU of those it may run on.
fn pin_to(cpu: usize) {
    // SAFETY: `set` is a plain bitmask owned by this frame; the calls only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(allowed[cpu % allowed.len()], &mut one);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one),
            0
        );
    }
    assert_eq!(
        std::thread::available_parallelism().unwrap().get(),
        1,
        "pinned to one CPU"
    );
}
