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
