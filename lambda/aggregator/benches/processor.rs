//! Throughput of the pure processor (records per second on one core): `extract` then `plan`
//! over a batch of bucket modifications, as a Lambda batch or a runner poll would bring.
//!
//! `cargo bench -p dynalimit-aggregator --bench processor`

use std::collections::HashMap;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dynalimit_aggregator::SnapshotWindow;
use dynalimit_aggregator::processor::{extract, plan};
use dynalimit_aggregator::sample::modifications;

fn processor(c: &mut Criterion) {
    let windows = [SnapshotWindow::Hourly, SnapshotWindow::Daily];
    let mut group = c.benchmark_group("processor");
    for size in [100usize, 1000] {
        let records = modifications(size);
        group.throughput(Throughput::Elements(size as u64));
        group.bench_function(format!("extract_and_plan/{size}"), |b| {
            b.iter(|| {
                let extracted = extract(std::hint::black_box(&records));
                plan(&extracted.usage, &HashMap::new(), &windows)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, processor);
criterion_main!(benches);
