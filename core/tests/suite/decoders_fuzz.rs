//! The fuzz targets' entry points, fed random and mutated bytes on the stable toolchain, so
//! `make test` exercises them without nightly (the coverage-guided campaigns are `make fuzz`).
//! Nothing may panic, and every refusal must be a clear error value.

use rand::{Rng, SeedableRng};
use velvet_rope::ticket::{Keyring, RoomId, Ticket, TicketState, ENCODED_LEN};
use velvet_rope::{Config, Engine, Outcome};

const NOW: u32 = 1_800_000_000;

fn mutate(rng: &mut rand::rngs::StdRng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..5) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] = rng.gen();
            }
            2 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v.remove(i);
            }
            3 => {
                let i = rng.gen_range(0..=v.len());
                v.insert(i, rng.gen());
            }
            _ => v.truncate(rng.gen_range(0..=v.len())),
        }
    }
    v
}

#[test]
fn ticket_decoding_survives_random_and_mutated_input() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7e1e7);
    let keys = Keyring::new(&[(3, [9; 32])], None).unwrap();
    let room = RoomId::new("r");
    let valid = keys
        .seal(
            &room,
            &Ticket {
                id: 77,
                state: TicketState::Admitted,
                arrival: 0,
                accepted_at: NOW,
                counted: 1,
                last_checkin: NOW,
                expires: NOW + 600,
                incarnation: 5,
            },
        )
        .as_str()
        .to_owned();
    let mut accepted = 0;
    for i in 0..200_000 {
        let bytes = if i % 2 == 0 {
            mutate(&mut rng, valid.as_bytes())
        } else {
            let n = rng.gen_range(0..2 * ENCODED_LEN);
            (0..n).map(|_| rng.gen()).collect()
        };
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        if let Ok(t) = keys.open(text, &room, NOW, 30) {
            assert_eq!(t.id, 77);
            // base64 has no slack at this length: only the untouched ticket may pass.
            assert_eq!(text, valid, "a mutated ticket was accepted");
            accepted += 1;
        }
    }
    assert!(
        accepted > 0,
        "no-op mutations of the valid ticket still pass"
    );
}

#[test]
fn engine_admit_survives_garbage_cookies() {
    let e = Engine::from_text(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 1000000\nnew_users_per_minute = 1000000\n",
        u64::from(NOW) * 1000,
    )
    .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let good = e
        .admit("r", None, u64::from(NOW) * 1000)
        .unwrap()
        .set_cookie
        .unwrap();
    let good = good.split(';').next().unwrap().to_owned();
    for i in 0..50_000 {
        let bytes = if i % 2 == 0 {
            mutate(&mut rng, good.as_bytes())
        } else {
            (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect()
        };
        let header = String::from_utf8_lossy(&bytes);
        let d = e
            .admit("r", Some(&header), u64::from(NOW) * 1000 + 1)
            .unwrap();
        assert_ne!(d.outcome, Outcome::Reject);
    }
}

#[test]
fn config_parsing_survives_random_and_mutated_input() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let seeds = [
        velvet_rope::config::EMBEDDED_DEFAULT.to_owned(),
        serde_json::to_string(&Config::embedded_default()).unwrap(),
        "[tickets]\nsigning_key = 1\n[[tickets.keys]]\nid = 1\nsecret = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n".to_owned(),
    ];
    let mut ok = 0;
    for i in 0..30_000 {
        let seed = &seeds[i % seeds.len()];
        let bytes = mutate(&mut rng, seed.as_bytes());
        let text = String::from_utf8_lossy(&bytes);
        match Config::from_text(&text) {
            Ok(cfg) => {
                ok += 1;
                cfg.validate().unwrap();
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    assert!(ok > 0, "some mutations stay valid");
}

/// A shared region or state file is bytes another process (or a disk) hands in: a region
/// with random bytes changed anywhere (header, directory, a room's header and counters) is
/// attached or refused with an error, never a crash, and the engine over it keeps deciding.
#[test]
fn shared_region_attach_survives_corrupt_bytes() {
    let cfg = Config::from_toml(
        "[[rooms]]\nname = \"r\"\ntotal_active_users = 20\nnew_users_per_minute = 100\n\
         session_duration = 2\nmax_live_waiters = 1024\nqueue_buckets = 16\n",
    )
    .unwrap();
    let size = Engine::shared_region_size(&cfg);
    let words = size.div_ceil(8) + 16;
    let aligned = |v: &mut Vec<u64>| {
        let raw = v.as_mut_ptr() as *mut u8;
        let pad = raw.align_offset(128);
        // SAFETY: `pad < 128` and the vector has 128 spare bytes.
        unsafe { raw.add(pad) }
    };
    let now = u64::from(NOW) * 1000;
    let mut valid = vec![0u64; words];
    let base = aligned(&mut valid);
    {
        // SAFETY: `valid` outlives the engine and nothing else touches it meanwhile.
        let e = unsafe { Engine::new_shared(cfg.clone(), now, base, size) }.unwrap();
        for i in 0..30 {
            e.admit("r", None, now + i).unwrap();
        }
        e.tick(now + 1000);
    }
    // SAFETY: `base` points at `size` initialised bytes of `valid`.
    let image = unsafe { std::slice::from_raw_parts(base, size) }.to_vec();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xbad);
    let (mut attached, mut refused) = (0, 0);
    for round in 0..400 {
        let mut bytes = image.clone();
        for _ in 0..rng.gen_range(1..6) {
            // Mostly the headers and the directory, where the structure is; sometimes anywhere.
            let at = if round % 3 == 0 {
                rng.gen_range(0..bytes.len())
            } else {
                rng.gen_range(0..(40 * 1024).min(bytes.len()))
            };
            bytes[at] = rng.gen();
        }
        let mut copy = vec![0u64; words];
        let b = aligned(&mut copy);
        // SAFETY: `copy` has room for `size` bytes from the aligned base.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), b, size) };
        // SAFETY: `copy` outlives the engine and nothing else touches it meanwhile.
        match unsafe { Engine::new_shared(cfg.clone(), now + 2000, b, size) } {
            Ok(e) => {
                attached += 1;
                for i in 0..5 {
                    e.admit("r", None, now + 2000 + i).unwrap();
                }
                e.tick(now + 3000);
                let _ = e.stats("r").unwrap();
            }
            Err(err) => {
                refused += 1;
                assert!(!err.to_string().is_empty());
            }
        }
    }
    assert!(
        attached > 0 && refused > 0,
        "{attached} attached, {refused} refused"
    );
}

#[test]
fn routing_survives_random_and_mutated_targets() {
    use velvet_rope::routing::{CaseRule, Route, Router};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7a46e7);
    let routers = [CaseRule::Sensitive, CaseRule::Insensitive, CaseRule::Either].map(|case| {
        Router::new(
            [("/shop", "shop"), ("/caf\u{e9}", "cafe")],
            Some("site"),
            ["/static/"],
            case,
        )
        .unwrap()
    });
    let seeds: [&[u8]; 6] = [
        b"/static/%2e%2e/shop/item?x=1#y",
        b"http://user@host:80/static/..%2Fshop",
        b"/static\\..\\shop;x/%252e%252e//",
        b"/caf%C3%A9/%c0%ae%c0%ae/%zz",
        "/\u{212a}/\u{17f}tatic/../shop".as_bytes(),
        b"//evil/\t/shop/%00",
    ];
    let mut rooms = 0;
    for i in 0..200_000 {
        let target = if i % 2 == 0 {
            mutate(&mut rng, seeds[i % seeds.len()])
        } else {
            (0..rng.gen_range(0..48)).map(|_| rng.gen()).collect()
        };
        for router in &routers {
            if let Route::Room(r) = router.route(&target) {
                assert!(r < router.rooms().len());
                rooms += 1;
            }
        }
    }
    assert!(rooms > 0);
}

/// Whole requests (random and mutated methods, targets, hosts, headers, clients) through the
/// conformance table's routes and rules: never a panic, and every decision well formed.
#[test]
fn requests_survive_random_and_mutated_fields() {
    const NOW_MS: u64 = NOW as u64 * 1000;
    use std::net::IpAddr;
    use velvet_rope::request::Request;
    let engine = Engine::from_text(
        include_str!("../../../conformance/front_doors.toml"),
        NOW_MS,
    )
    .expect("the conformance configuration is valid");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0c0ffee);
    let targets: [&[u8]; 5] = [
        b"/static/%2e%2e/shop/item?preview=yes#x",
        b"http://shop.example.com:80/static/..%2Fcart?preview=no&preview=yes",
        b"/shop/api/..;/x?%70review=%79es",
        b"/HEALTH\\..\\cart",
        b"*",
    ];
    let hosts: [&[u8]; 4] = [
        b"shop.example.com",
        b"API.example.com.:1",
        b"[::1]:8",
        b"x.events.example.com",
    ];
    let names: [&[u8]; 5] = [
        b"Cookie",
        b"x-monitor-token",
        b"User-Agent",
        b"velvet-rope-ticket",
        b"X-Forwarded-For",
    ];
    let values: [&[u8]; 4] = [
        b"partner=p-acme; a=1",
        b"s3cret",
        b"BadBot",
        b"\xff\x00=;,\"",
    ];
    let (mut routed, mut bypassed) = (0, 0);
    for i in 0..50_000 {
        let target = if i % 3 == 0 {
            (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect()
        } else {
            mutate(&mut rng, targets[i % targets.len()])
        };
        let host = match i % 4 {
            0 => None,
            1 => Some(
                (0..rng.gen_range(0..20))
                    .map(|_| rng.gen())
                    .collect::<Vec<u8>>(),
            ),
            _ => Some(mutate(&mut rng, hosts[i % hosts.len()])),
        };
        let owned: Vec<(Vec<u8>, Vec<u8>)> = (0..rng.gen_range(0..6))
            .map(|j| {
                let name = mutate(&mut rng, names[(i + j) % names.len()]);
                (name, mutate(&mut rng, values[(i * 7 + j) % values.len()]))
            })
            .collect();
        let headers: Vec<(&[u8], &[u8])> = owned.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let client = match i % 3 {
            0 => None,
            1 => Some(IpAddr::from([10, 1, rng.gen(), rng.gen()])),
            _ => Some(IpAddr::from(rng.gen::<[u8; 16]>())),
        };
        let method = mutate(&mut rng, b"GET");
        let request = Request {
            method: &method,
            target: &target,
            host: host.as_deref(),
            headers: &headers,
            client,
        };
        if let Some(r) = engine.decide_request(&request, NOW_MS) {
            routed += 1;
            bypassed += usize::from(r.decision.bypassed);
            assert!(!(r.decision.bypassed && r.decision.rule.is_none()));
            assert!(
                r.decision.would_have.is_none()
                    || r.decision.outcome == velvet_rope::Outcome::Admit
            );
        }
        engine
            .decide_request_in(b"shop", &request, NOW_MS)
            .expect("a configured room");
    }
    assert!(
        routed > 0 && bypassed > 0,
        "{routed} routed, {bypassed} bypassed"
    );
}
