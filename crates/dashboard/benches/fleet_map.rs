//! The fleet map's server time for a large fleet: 100,000 clusters in each of 3 environments
//! (300,000 in all) over 500 cluster types, read from a `MemorySource`, rendered through the
//! router (query parsing, aggregation, HTML) without a socket. The target is 200 ms.
//!
//! `cargo bench -p kalypso-dashboard --bench fleet_map`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use kalypso_dashboard::demo::synthetic_fleet;
use kalypso_dashboard::{MemorySource, router};
use tower::ServiceExt;

fn fleet_map(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let source = Arc::new(MemorySource::new(synthetic_fleet(3, 500, 100_000)));
    let app = router(source);
    let get = |uri: &'static str| {
        let app = app.clone();
        let runtime = &runtime;
        move || {
            runtime.block_on(async {
                let response = app
                    .clone()
                    .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
                    .await
                    .expect("response");
                assert_eq!(response.status(), StatusCode::OK);
                let body = response.into_body().collect().await.expect("body");
                black_box(body.to_bytes().len())
            })
        }
    };
    // One plain measurement first, as a number to quote.
    let once = get("/");
    let start = Instant::now();
    let bytes = once();
    println!(
        "fleet map of 300,000 clusters: {:.1} ms, {bytes} bytes of HTML",
        start.elapsed().as_secs_f64() * 1000.0
    );
    let mut group = c.benchmark_group("fleet_map_300k_clusters");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    group.bench_function("all", |b| b.iter(get("/")));
    group.bench_function("failed_in_prod", |b| {
        b.iter(get("/?environment=prod&state=failed"))
    });
    group.bench_function("cluster_type_page", |b| {
        b.iter(get("/environments/prod/cluster-types/type-0250?state=failed"))
    });
    group.bench_function("promotions", |b| b.iter(get("/promotions")));
    group.finish();
}

criterion_group!(benches, fleet_map);
criterion_main!(benches);
