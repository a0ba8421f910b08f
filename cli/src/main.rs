//! The `velvet-rope` command: run the demo, check a configuration, make keys, read tickets.

use std::io::Read;
use std::process::ExitCode;

use base64::Engine as _;
use clap::{Parser, Subcommand};
use rand::RngCore;
use velvet_rope::ticket::{RoomId, TicketState};
use velvet_rope::Config;

mod allocate;
mod demo;

/// velvet-rope: an in-process admission engine (virtual waiting room and capacity leases).
#[derive(Parser)]
#[command(name = "velvet-rope", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drive a flash sale through the real engine in virtual time and print a per-minute table.
    Demo(demo::DemoArgs),
    /// Validate a configuration file (TOML, or JSON when it ends in .json).
    CheckConfig {
        /// The file.
        path: String,
    },
    /// Read one JSON object on stdin (`{"algorithm", "capacity", "clients": [{"id", "wants",
    /// "subclients"?, "priority"?}]}`) and print the steady-state grants as JSON.
    Allocate,
    /// Print a fresh random ticket key as a TOML snippet.
    Keygen {
        /// Key id to put in the snippet.
        #[arg(long, default_value_t = 1)]
        id: u8,
    },
    /// Open a ticket with a configuration's keys and print its fields as JSON.
    Inspect {
        /// Configuration file holding the keys.
        #[arg(long)]
        config: String,
        /// Room the ticket belongs to.
        #[arg(long)]
        room: String,
        /// The ticket (cookie value).
        ticket: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).map(|_| ()),
        Command::CheckConfig { path } => check_config(&path),
        Command::Allocate => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .map_err(|e| format!("cannot read stdin: {e}"))
                .and_then(|_| allocate::run(&input))
                .map(|out| println!("{out}"))
        }
        Command::Keygen { id } => {
            let mut key = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut key);
            println!(
                "[[tickets.keys]]\nid = {id}\nsecret = \"{}\"",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
            );
            Ok(())
        }
        Command::Inspect {
            config,
            room,
            ticket,
        } => inspect(&config, &room, &ticket),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("velvet-rope: {e}");
            ExitCode::from(2)
        }
    }
}

fn check_config(path: &str) -> Result<(), String> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| e.to_string())?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read `{path}`: {e}"))?
    };
    let cfg = if path.ends_with(".json") {
        Config::from_json(&text)
    } else {
        Config::from_text(&text)
    }
    .map_err(|e| e.to_string())?;
    println!(
        "ok: {} room(s), {} ticket key(s)",
        cfg.rooms.len(),
        cfg.tickets.keys.len()
    );
    for r in &cfg.rooms {
        println!(
            "  {}: total_active_users {}, new_users_per_minute {}, session {} min, {:?}",
            r.name,
            r.total_active_users,
            r.new_users_per_minute,
            r.session_duration,
            r.queueing_method
        );
    }
    Ok(())
}

fn inspect(config: &str, room: &str, ticket: &str) -> Result<(), String> {
    let cfg = Config::from_path(config).map_err(|e| e.to_string())?;
    if !cfg.rooms.iter().any(|r| r.name == room) {
        let names: Vec<&str> = cfg.rooms.iter().map(|r| r.name.as_str()).collect();
        return Err(format!(
            "no room `{room}` in {config} (its rooms: {})",
            names.join(", ")
        ));
    }
    let ring = cfg.tickets.keyring().map_err(|e| e.to_string())?.ok_or(
        "the configuration has no ticket keys (tickets were sealed with an ephemeral key)",
    )?;
    let value = ticket.split_once('=').map_or(ticket, |(_, v)| v);
    let t = ring
        .open_any_time(value.trim(), &RoomId::new(room))
        .map_err(|e| format!("ticket refused: {e}"))?;
    let json = serde_json::json!({
        "room": room,
        "id": format!("{:016x}", t.id),
        "state": match t.state { TicketState::Admitted => "admitted", TicketState::Queued => "queued" },
        "arrival": t.arrival,
        "accepted_at": t.accepted_at,
        "counted": t.counted,
        "last_checkin": t.last_checkin,
        "expires": t.expires,
        "incarnation": format!("{:08x}", t.incarnation),
    });
    println!("{json}");
    Ok(())
}
