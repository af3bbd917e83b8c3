//! The Wasm arm of the parser figures: reads a Pod's JSON text on stdin, takes rounds and reads
//! per round as arguments, and prints one tab-separated line per candidate: name, median µs,
//! min, max.

use std::io::Read;

fn main() {
    let mut text = String::new();
    if let Err(err) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("json-seam: reading the Pod from stdin: {err}");
        std::process::exit(2);
    }
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let (Some(Ok(rounds)), Some(Ok(per_round))) = (args.next(), args.next()) else {
        eprintln!("usage: json-seam ROUNDS READS-PER-ROUND < pod.json");
        std::process::exit(2);
    };
    for figure in json_seam::measure(&text, rounds, per_round) {
        println!(
            "{}\t{}\t{}\t{}",
            figure.name, figure.median_us, figure.min_us, figure.max_us
        );
    }
}
