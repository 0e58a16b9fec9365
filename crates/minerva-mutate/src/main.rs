//! `minerva-mutate`: runs a mutation campaign over the fixture models across worker processes.
//! A worker runs cases in-process; the supervisor catches what a worker cannot report itself
//! (an abort, a hang past the time limit), saves that case's input and restarts the worker
//! after it. Every failing input is saved with a `why.txt`; the exit status is 1 if any case
//! failed.

mod campaign;

use clap::Parser;

#[global_allocator]
static ALLOC: minerva_mutate::alloc::Guarded = minerva_mutate::alloc::Guarded;

fn main() {
    let args = campaign::Args::parse();
    std::process::exit(campaign::main(args));
}
