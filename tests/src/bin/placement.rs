//! `cargo run -p harness-tests --bin placement -- [--nodes N --threads M --capacity C ...]`
//! (`just placement`): which node should own a thread? A seeded simulation of N nodes, each with
//! an LRU of C warm CLI processes, serving M threads, for three placements behind three load
//! balancers, with one node lost at half time and back at three quarters. `docs/scale-out.md`
//! states the model, the table it printed and the decision taken from it.
//!
//! No daemon, no CLI, no clock, std only: the same flags and seed print the same table.

use std::collections::HashSet;
use std::str::FromStr;

/// Turn cost model, ms: warm; cold (spawn + `--resume`, the middle of 450–700); a new thread's
/// first turn on a spare; one forwarding hop between nodes (assumed, not measured).
const WARM_MS: f64 = 30.0;
const COLD_MS: f64 = 575.0;
const NEW_MS: f64 = 130.0;
const FORWARD_MS: f64 = 2.0;
/// A thread with a turn this recent wants a warm process: a node's "active" load.
const ACTIVE_SECS: f64 = 300.0;
/// The node lost at half time and back at three quarters.
const VICTIM: usize = 0;

const USAGE: &str = "placement [--nodes 4] [--threads 5000] [--capacity 16] [--sessions 4000] \
[--hours 4] [--turns 6] [--gap 20] [--zipf 1.0] [--ttl 15] [--seed 1]";

#[derive(Clone, Debug)]
struct Config {
    nodes: usize,
    threads: usize,
    /// Warm processes per node (the pool's capacity).
    capacity: usize,
    /// Conversations over the run; each picks its thread by Zipf weight.
    sessions: usize,
    hours: f64,
    /// Mean turns per session (geometric).
    turns: f64,
    /// Mean think time between two turns of a session, s (exponential).
    gap: f64,
    zipf: f64,
    /// Lease TTL, s: how long a dead node's leases (and its heartbeat row) still look live.
    ttl: f64,
    seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            nodes: 4,
            threads: 5000,
            capacity: 16,
            sessions: 4000,
            hours: 4.0,
            turns: 6.0,
            gap: 20.0,
            zipf: 1.0,
            ttl: 15.0,
            seed: 1,
        }
    }
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
    fn num<T: FromStr>(flag: &str, value: &str) -> Result<T, String> {
        value
            .parse()
            .map_err(|_| format!("{flag}: cannot parse {value:?}"))
    }
    let mut cfg = Config::default();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--nodes" => cfg.nodes = num(&flag, &value)?,
            "--threads" => cfg.threads = num(&flag, &value)?,
            "--capacity" => cfg.capacity = num(&flag, &value)?,
            "--sessions" => cfg.sessions = num(&flag, &value)?,
            "--hours" => cfg.hours = num(&flag, &value)?,
            "--turns" => cfg.turns = num(&flag, &value)?,
            "--gap" => cfg.gap = num(&flag, &value)?,
            "--zipf" => cfg.zipf = num(&flag, &value)?,
            "--ttl" => cfg.ttl = num(&flag, &value)?,
            "--seed" => cfg.seed = num(&flag, &value)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if cfg.nodes < 2 || cfg.threads == 0 || cfg.capacity == 0 || cfg.turns < 1.0 {
        return Err("need --nodes >= 2, --threads >= 1, --capacity >= 1, --turns >= 1".into());
    }
    Ok(cfg)
}

/// splitmix64: tiny, seedable, plenty for a workload.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// splitmix64's finalizer: a 64-bit mix, the only hash here.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Rendezvous (highest random weight) hashing: the live node with the highest weight for this
/// thread. A node leaving moves only the threads it won; coming back, it wins them again.
fn rendezvous(thread: u32, live: &[bool]) -> Option<usize> {
    (0..live.len())
        .filter(|&n| live[n])
        .max_by_key(|&n| mix((u64::from(thread) << 32) | n as u64))
}

/// One node's warm processes, least recently used first.
#[derive(Debug)]
struct Lru {
    capacity: usize,
    order: Vec<u32>,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Lru {
            capacity,
            order: Vec::with_capacity(capacity),
        }
    }
    /// A turn of `thread`: true when it was warm. A cold one spawns a process, evicting the least
    /// recently used when the node is full.
    fn touch(&mut self, thread: u32) -> bool {
        let warm = self.remove(thread);
        if !warm && self.order.len() >= self.capacity {
            self.order.remove(0);
        }
        self.order.push(thread);
        warm
    }
    fn remove(&mut self, thread: u32) -> bool {
        match self.order.iter().position(|&t| t == thread) {
            Some(i) => {
                self.order.remove(i);
                true
            }
            None => false,
        }
    }
}

/// Who takes a free lease (and, for rendezvous, who should hold a taken one).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    /// The node that received the thread's first request keeps it until it dies; then whichever
    /// node receives the next request takes it.
    Created,
    /// The rendezvous winner over the nodes that look live.
    Rendezvous,
    /// The live node with the fewest active threads, then sticky.
    LeastLoaded,
}

/// How the load balancer in front picks the node that receives a request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Balancer {
    Random,
    /// Per client (here: per thread), a random node kept until it dies.
    Sticky,
    /// Rendezvous over live nodes on the thread id (a balancer that can read it).
    Hash,
}

/// One run's figures. Latencies are model figures from the constants above.
#[derive(Debug, Default, PartialEq)]
struct Report {
    requests: u64,
    /// First turns of new threads (a spare, neither warm nor cold).
    new: u64,
    warm: u64,
    cold: u64,
    forwarded: u64,
    latency_ms: f64,
    /// Active threads per live node, sampled each minute: sum and count for the mean, the sum of
    /// each sample's busiest node (its mean is the typical max), and the peak.
    active_sum: u64,
    active_samples: u64,
    busiest_sum: u64,
    samples: u64,
    active_max: u64,
    /// Threads warm on the victim when it died that had a turn before it came back.
    warm_lost: u64,
    /// Requests that waited for the victim's leases to expire, and the total wait, s.
    stalled: u64,
    stall_secs: f64,
    /// Per node: leases taken over from the dead victim.
    takeovers: Vec<u64>,
    /// Leases moved from a live owner after the victim came back (each one a cold resume).
    moved_on_rejoin: u64,
}

/// Sessions of a few turns with think-time gaps on threads drawn by Zipf weight (a few hot
/// threads, a long idle tail), as (time s, thread) sorted by time.
fn workload(cfg: &Config) -> Vec<(f64, u32)> {
    let mut rng = Rng(cfg.seed);
    let mut cumulative = Vec::with_capacity(cfg.threads);
    let mut total = 0.0;
    for rank in 1..=cfg.threads {
        total += (rank as f64).powf(-cfg.zipf);
        cumulative.push(total);
    }
    let end = cfg.hours * 3600.0;
    let keep_going = 1.0 - 1.0 / cfg.turns;
    let mut requests = Vec::new();
    for _ in 0..cfg.sessions {
        let pick = rng.unit() * total;
        let thread = cumulative
            .partition_point(|&c| c < pick)
            .min(cfg.threads - 1) as u32;
        let mut at = rng.unit() * end;
        while at < end {
            requests.push((at, thread));
            if rng.unit() >= keep_going {
                break;
            }
            at += rng.exp(cfg.gap);
        }
    }
    requests.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    requests
}

/// Threads with a turn in the last `ACTIVE_SECS`, per owner.
fn active_per_node(owner: &[Option<usize>], last_turn: &[f64], now: f64, nodes: usize) -> Vec<u64> {
    let mut counts = vec![0; nodes];
    for (o, &at) in owner.iter().zip(last_turn) {
        if let Some(o) = *o {
            if now - at <= ACTIVE_SECS {
                counts[o] += 1;
            }
        }
    }
    counts
}

/// The node that serves this request under `policy`, given which nodes look live (`view`).
fn place(
    policy: Policy,
    thread: u32,
    held: Option<usize>,
    receiver: usize,
    view: &[bool],
    load: impl Fn() -> Vec<u64>,
) -> usize {
    if policy == Policy::Rendezvous {
        return rendezvous(thread, view).expect("the receiver is live");
    }
    match held {
        Some(o) if view[o] => o,
        _ if policy == Policy::Created => receiver,
        _ => {
            let load = load();
            (0..view.len())
                .filter(|&n| view[n])
                .min_by_key(|&n| (load[n], n))
                .expect("the receiver is live")
        }
    }
}

fn simulate(cfg: &Config, requests: &[(f64, u32)], policy: Policy, balancer: Balancer) -> Report {
    let n = cfg.nodes;
    let mut rng = Rng(mix(cfg.seed ^ 0xBA1A)); // the balancer's coin, the same for every policy
    let end = cfg.hours * 3600.0;
    let (die_at, back_at) = (end * 0.5, end * 0.75);
    let mut alive = vec![true; n];
    let mut lrus: Vec<Lru> = (0..n).map(|_| Lru::new(cfg.capacity)).collect();
    // The lease table: owner per thread, `None` when free; `created` tells new threads apart.
    let mut owner: Vec<Option<usize>> = vec![None; cfg.threads];
    let mut created = vec![false; cfg.threads];
    let mut sticky: Vec<Option<usize>> = vec![None; cfg.threads];
    let mut last_turn = vec![f64::NEG_INFINITY; cfg.threads];
    let mut warm_at_death = HashSet::new();
    let mut r = Report {
        takeovers: vec![0; n],
        ..Report::default()
    };
    let mut next_sample = 60.0;
    for &(now, thread) in requests {
        let t = thread as usize;
        while next_sample <= now {
            let counts = active_per_node(&owner, &last_turn, next_sample, n);
            let live_counts: Vec<u64> = (0..n).filter(|&i| alive[i]).map(|i| counts[i]).collect();
            let busiest = live_counts.iter().copied().max().unwrap_or(0);
            r.active_sum += live_counts.iter().sum::<u64>();
            r.active_samples += live_counts.len() as u64;
            r.busiest_sum += busiest;
            r.samples += 1;
            r.active_max = r.active_max.max(busiest);
            next_sample += 60.0;
        }
        let victim_up = now < die_at || now >= back_at;
        if alive[VICTIM] && !victim_up {
            warm_at_death = lrus[VICTIM].order.drain(..).collect();
        }
        if !alive[VICTIM] && victim_up {
            // Back with a new process and no leases: its old ones expired while it was down.
            warm_at_death.clear();
            owner
                .iter_mut()
                .filter(|o| **o == Some(VICTIM))
                .for_each(|o| *o = None);
        }
        alive[VICTIM] = victim_up;
        // Peers see the victim's heartbeat row and leases until they expire; the balancer's
        // health check is assumed to drop it at once.
        let mut seen = alive.clone();
        seen[VICTIM] |= now >= die_at && now < die_at + cfg.ttl;

        let live: Vec<usize> = (0..n).filter(|&i| alive[i]).collect();
        let receiver = match balancer {
            Balancer::Random => live[rng.below(live.len())],
            Balancer::Sticky => match sticky[t] {
                Some(s) if alive[s] => s,
                _ => *sticky[t].insert(live[rng.below(live.len())]),
            },
            Balancer::Hash => rendezvous(thread, &alive).expect("one node down at most"),
        };
        let load = || active_per_node(&owner, &last_turn, now, n);
        let mut target = place(policy, thread, owner[t], receiver, &seen, load);
        if !alive[target] {
            // The node chosen is dead but still looks live (its lease or heartbeat row has not
            // expired): the request waits for the expiry, then goes through again.
            let wait = die_at + cfg.ttl - now;
            r.stalled += 1;
            r.stall_secs += wait;
            r.latency_ms += wait * 1000.0;
            target = place(policy, thread, owner[t], receiver, &alive, load);
        }
        if receiver != target {
            r.forwarded += 1;
            r.latency_ms += FORWARD_MS;
        }
        if let Some(previous) = owner[t].filter(|&p| p != target) {
            lrus[previous].remove(thread); // the old owner gives up the process with the lease
            if previous == VICTIM && !alive[VICTIM] {
                r.takeovers[target] += 1;
            } else if now >= back_at {
                r.moved_on_rejoin += 1;
            }
        }
        owner[t] = Some(target);
        let warm = lrus[target].touch(thread);
        r.requests += 1;
        if !created[t] {
            created[t] = true;
            r.new += 1;
            r.latency_ms += NEW_MS;
        } else if warm {
            r.warm += 1;
            r.latency_ms += WARM_MS;
        } else {
            r.cold += 1;
            r.latency_ms += COLD_MS;
        }
        r.warm_lost += u64::from(warm_at_death.remove(&thread));
        last_turn[t] = now;
    }
    r
}

fn percent(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn row(policy: Policy, balancer: Balancer, r: &Report) -> String {
    let survivors: Vec<String> = (0..r.takeovers.len())
        .filter(|&n| n != VICTIM)
        .map(|n| r.takeovers[n].to_string())
        .collect();
    format!(
        "| {policy:?} | {balancer:?} | {:.1} % | {:.1} % | {:.1} / {:.1} / {} | {:.0} | {} | {} ({:.1} s) | {} | {} |",
        percent(r.warm, r.warm + r.cold),
        percent(r.forwarded, r.requests),
        r.active_sum as f64 / r.active_samples.max(1) as f64,
        r.busiest_sum as f64 / r.samples.max(1) as f64,
        r.active_max,
        r.latency_ms / r.requests.max(1) as f64,
        r.warm_lost,
        r.stalled,
        r.stall_secs / r.stalled.max(1) as f64,
        survivors.join(" / "),
        r.moved_on_rejoin,
    )
}

fn main() {
    let cfg = match parse_args(std::env::args().skip(1)) {
        Ok(cfg) => cfg,
        Err(err) => {
            eprintln!("{err}\nusage: {USAGE}");
            std::process::exit(2);
        }
    };
    let requests = workload(&cfg);
    let threads = requests
        .iter()
        .map(|&(_, t)| t)
        .collect::<HashSet<_>>()
        .len();
    println!("{cfg:?}");
    println!(
        "{} requests on {threads} threads; node {VICTIM} dies at {:.1} h, back at {:.1} h.\n",
        requests.len(),
        cfg.hours * 0.5,
        cfg.hours * 0.75
    );
    println!(
        "| placement | balancer | warm hits | forwarded | active/node mean / busiest / peak | turn ms | loss: warm lost | loss: stalled (mean wait) | loss: takeovers per survivor | rejoin: moved |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for policy in [Policy::Created, Policy::Rendezvous, Policy::LeastLoaded] {
        for balancer in [Balancer::Random, Balancer::Sticky, Balancer::Hash] {
            println!(
                "{}",
                row(
                    policy,
                    balancer,
                    &simulate(&cfg, &requests, policy, balancer)
                )
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_picks_a_live_node_and_moves_only_the_dead_nodes_threads() {
        let all = [true; 5];
        let mut without_two = all;
        without_two[2] = false;
        let mut moved = 0;
        for thread in 0..2000 {
            let before = rendezvous(thread, &all).unwrap();
            let after = rendezvous(thread, &without_two).unwrap();
            assert_ne!(after, 2);
            if before == 2 {
                moved += 1;
            } else {
                assert_eq!(before, after, "thread {thread} moved off a live node");
            }
        }
        // About a fifth of the threads were on node 2.
        assert!((300..500).contains(&moved), "{moved}");
        assert_eq!(rendezvous(7, &[false, false]), None);
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        assert!(!lru.touch(1));
        assert!(!lru.touch(2));
        assert!(lru.touch(1)); // 2 is now the least recently used
        assert!(!lru.touch(3));
        assert_eq!(lru.order, [1, 3]);
        assert!(!lru.touch(2));
        assert_eq!(lru.order, [3, 2]);
    }

    #[test]
    fn same_seed_same_figures() {
        let cfg = Config {
            threads: 300,
            sessions: 200,
            hours: 1.0,
            ..Config::default()
        };
        let run =
            |cfg: &Config| simulate(cfg, &workload(cfg), Policy::LeastLoaded, Balancer::Random);
        let first = run(&cfg);
        assert_eq!(first, run(&cfg));
        assert!(first.requests > 0 && first.takeovers.iter().sum::<u64>() > 0);
        assert_ne!(first, run(&Config { seed: 2, ..cfg }));
    }
}
