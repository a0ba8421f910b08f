//! The `velvet-rope` command: run the demo, simulate a scenario, check a configuration, compute lease grants, make
//! keys, read tickets, import a Cloudflare waiting room.

use std::io::Read;
use std::process::ExitCode;

use base64::Engine as _;
use clap::{Parser, Subcommand};
use rand::RngCore;
use velvet_rope::ticket::{RoomId, TicketState};
use velvet_rope::Config;

mod allocate;
mod demo;
mod import_cloudflare;
mod simulate;

/// velvet-rope: an in-process admission engine (virtual waiting room and capacity leases).
#[derive(Parser)]
#[command(
    name = "velvet-rope",
    version,
    about = "velvet-rope: an in-process admission engine (a virtual waiting room, and capacity \
             leases).\nCommands: demo, simulate, check-config, allocate, keygen, inspect, import-cloudflare."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drive a flash sale through the real engine in virtual time and print a per-minute table.
    Demo(demo::DemoArgs),
    /// Run a scenario (a room, its hosts, a crowd, faults) through the real engine in virtual
    /// time: how long people wait, how full the origin gets, what a failure costs. Prints a
    /// table (or JSON) and draws a plot.
    Simulate(simulate::SimulateArgs),
    /// Validate a configuration file (TOML, or JSON when it ends in .json).
    CheckConfig {
        /// The file.
        path: String,
    },
    /// Print the steady-state grants of one resource's lease algorithm, as JSON, for the clients
    /// read from stdin.
    #[command(long_about = ALLOCATE_HELP)]
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
    /// Convert a Cloudflare waiting room (and its events), as Cloudflare's API returns them,
    /// into a velvet-rope configuration; what has no counterpart is listed on stderr and as
    /// comments in the output.
    ImportCloudflare(import_cloudflare::ImportArgs),
}

const ALLOCATE_HELP: &str = "\
Print the steady-state grants of one resource's lease algorithm, as JSON.

Input on stdin, one JSON object:
  {\"algorithm\": \"fair_share\", \"capacity\": 100, \"reserved\": 0,
   \"clients\": [{\"id\": \"a\", \"wants\": 30, \"subclients\": 1, \"priority\": 0}, ...]}
(`reserved`, `subclients` and `priority` are optional.) Output: {\"grants\": {\"a\": 30.0, ...}}.

Algorithms (a higher priority band is served fully before a lower one; within a band):
  none                  everyone gets what they want
  static                everyone gets min(wants, capacity): capacity is per client
  proportional_share    below capacity everyone gets their wants; above it, everyone gets at
                        least the equal share (if they want it), and what those under it leave
                        is split among the others in proportion to their excess demand
  fair_share            max-min fairness weighted by subclients: below capacity everyone gets
                        their wants; above it, the level L with sum(min(wants, L * subclients))
                        = capacity, each getting min(wants, L * subclients), exactly
  reserved_plus_shared  each client holds `reserved` and leases shared capacity above it

Example:
  echo '{\"algorithm\":\"fair_share\",\"capacity\":100,\"clients\":[{\"id\":\"a\",\"wants\":80},{\"id\":\"b\",\"wants\":40}]}' \\
    | velvet-rope allocate";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).and_then(|s| {
            if s.limits_held() {
                Ok(())
            } else {
                Err("the demo saw a limit broken (see the verdict above)".into())
            }
        }),
        Command::Simulate(args) => simulate::run(&args),
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
        Command::ImportCloudflare(args) => import_cloudflare::run(&args),
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
        "ok: {} room(s), {} resource template(s), {} ticket key(s){}",
        cfg.rooms.len(),
        cfg.resources.len(),
        cfg.tickets.keys.len(),
        if cfg.tickets.keys.is_empty() && !cfg.rooms.is_empty() {
            " (none: each engine makes an ephemeral key; tickets do not survive a restart \
             without a state file)"
        } else {
            ""
        }
    );
    for r in &cfg.rooms {
        println!(
            "  {}: total_active_users {}, new_users_per_minute {}, session {} min, {} queue, \
             {} bytes of counters",
            r.name,
            r.total_active_users,
            r.new_users_per_minute,
            r.session_duration,
            r.queueing_method.as_str(),
            velvet_rope::Engine::room_memory_bytes(r, &cfg.settings)
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
