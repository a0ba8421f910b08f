//! A process that dies while it writes a shared region's ticket key (no keys configured: the
//! processes share an ephemeral one) no longer leaves the region unusable: the next process
//! takes the writing over. (Item 6 of the exactness review: "the region's ticket key was
//! never written", for good.)

use velvet_rope::{Config, Engine};

const T0: u64 = 1_800_000_000_000;

#[repr(C, align(128))]
struct Block([u8; 128]);

fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_key_writer_that_died_is_taken_over() {
    let config = Config::from_text(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 5\nnew_users_per_minute = 5\n",
    )
    .unwrap();
    let size = Engine::shared_region_size(&config).div_ceil(128);
    let mut region: Vec<Block> = (0..size).map(|_| Block([0; 128])).collect();
    let base = region.as_mut_ptr().cast::<u8>();
    let len = size * 128;
    // SAFETY: `region` is 128-aligned, `len` bytes, zeroed, and outlives the engines.
    let first = unsafe { Engine::new_shared(config.clone(), T0, base, len) }.unwrap();
    let key = first.keyring();
    drop(first);
    // As a process that died writing it leaves the header: the key's state word held by
    // that process (its id and when it took it), half a key written.
    let words = base.cast::<u64>();
    // SAFETY: words 3 to 7 of the header (the key's state and the key), inside the region;
    // no engine uses it meanwhile.
    unsafe {
        words
            .add(3)
            .write((u64::from(dead_pid()) << 42) | monotonic_ms());
        words.add(4).write(0x1234);
        words.add(5).write(0);
    }
    let start = std::time::Instant::now();
    // SAFETY: as above.
    let second = unsafe { Engine::new_shared(config, T0, base, len) }
        .expect("a key whose writer died is written anew");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(1),
        "at once"
    );
    let sealed = second.admit("r", None, T0).unwrap().set_cookie.unwrap();
    let value = sealed.split(';').next().unwrap().split_once('=').unwrap().1;
    let room = velvet_rope::ticket::RoomId::new("r");
    assert!(
        second.keyring().open_any_time(value, &room).is_ok(),
        "the new key seals and opens"
    );
    assert!(
        key.open_any_time(value, &room).is_err(),
        "it is a new key (the old one was never finished in the region)"
    );
    drop(region);
}
