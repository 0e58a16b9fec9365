//! Opening and loading models through the service: the card, progress in bytes up to the
//! total, cancel (from the progress and from another thread), clear errors for what is not a
//! model, and unloading.

mod common;

use common::{fixture, service, tiny_model};
use minerva_service::card::Fit;
use minerva_service::{ServiceError, ServiceEvent, Store};
use std::time::Duration;

#[test]
fn the_card_says_what_a_model_holds_and_needs() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let card = svc.open(&tiny_model(), "cpu", Some(512)).unwrap();
    assert_eq!(card.format, "gguf");
    assert_eq!(card.architecture, "llama");
    assert!(card.parameters > 0 && card.tokenizer && card.chat_template);
    assert_eq!(card.memory.ctx, 512);
    assert!(card.memory.weights_bytes > 0 && card.memory.kv_bytes > 0);
    // On the CPU the free RAM is known, and a tiny model fits it.
    assert_eq!(card.memory.device, "cpu");
    assert!(card.memory.available_bytes.is_some());
    assert_eq!(card.memory.fits, Fit::Yes);
    // Opening made it a recent model.
    let recent = svc.store().recent_models(10).unwrap();
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].format, "gguf");
}

#[test]
fn progress_counts_bytes_up_to_the_total() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let mut seen = Vec::new();
    let info = svc
        .load_blocking(&tiny_model(), "cpu", None, &mut |b, t| {
            seen.push((b, t));
            true
        })
        .unwrap();
    assert!(seen.len() > 2, "{seen:?}");
    let total = seen[0].1;
    assert!(seen.iter().all(|&(_, t)| t == total));
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    assert_eq!(seen.last().unwrap().0, total);
    assert_eq!(info.backend, "cpu");
    assert_eq!(svc.loaded(), vec![info.clone()]);
    svc.unload(info.id).unwrap();
    assert!(svc.loaded().is_empty());
    assert_eq!(svc.unload(info.id), Err(ServiceError::NoSuchModel(info.id)));
}

#[test]
fn a_load_cancelled_midway_leaves_nothing_loaded() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let mut calls = 0;
    let r = svc.load_blocking(&tiny_model(), "cpu", None, &mut |_, _| {
        calls += 1;
        calls < 3
    });
    assert_eq!(r, Err(ServiceError::Cancelled));
    assert_eq!(calls, 3);
    assert!(svc.loaded().is_empty());
}

#[test]
fn a_background_load_reports_and_can_be_cancelled() {
    let (svc, rx) = service(Store::in_memory().unwrap());
    let id = svc.start_load(tiny_model(), "cpu".into(), None);
    let mut progress = 0;
    let done = loop {
        match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
            ServiceEvent::LoadProgress { load_id, .. } if load_id == id => progress += 1,
            e @ (ServiceEvent::LoadDone { .. } | ServiceEvent::LoadError { .. }) => break e,
            _ => {}
        }
    };
    assert!(progress >= 1);
    assert!(matches!(done, ServiceEvent::LoadDone { load_id, .. } if load_id == id));
    assert!(!svc.cancel_load(id), "a finished load cannot be cancelled");

    // A load cancelled from another thread as soon as it reports.
    let id = svc.start_load(fixture("qwen3/f32"), "cpu".into(), None);
    let end = loop {
        match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
            ServiceEvent::LoadProgress { load_id, .. } if load_id == id => {
                svc.cancel_load(id);
            }
            e @ (ServiceEvent::LoadDone { .. } | ServiceEvent::LoadError { .. }) => break e,
            _ => {}
        }
    };
    match end {
        ServiceEvent::LoadError {
            cancelled, message, ..
        } => assert!(cancelled, "{message}"),
        // A model this small may finish between two reports.
        ServiceEvent::LoadDone { .. } => eprintln!("the load finished before the cancel"),
        _ => unreachable!(),
    }
}

#[test]
fn what_is_not_a_model_gets_an_error_naming_it() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a gguf at all").unwrap();
    match svc.open(&junk, "cpu", None) {
        Err(ServiceError::Model(m)) => assert!(m.contains("junk.gguf"), "{m}"),
        other => panic!("{other:?}"),
    }
    let missing = dir.path().join("nowhere");
    assert!(matches!(
        svc.open(&missing, "cpu", None),
        Err(ServiceError::Model(_))
    ));
    assert!(svc.store().recent_models(10).unwrap().is_empty());
}

#[test]
fn models_in_other_tools_folders_are_found() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let home = tempfile::tempdir().unwrap();
    let lms = home.path().join(".lmstudio/models/someone/tiny");
    std::fs::create_dir_all(&lms).unwrap();
    std::fs::copy(tiny_model(), lms.join("tiny-Q4_0.gguf")).unwrap();
    svc.open(&fixture("qwen3/f32"), "cpu", None).unwrap();
    let found = minerva_service::library::found_models(svc.store(), Some(home.path()), &[]);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].source, "recent");
    assert_eq!(found[0].format, "safetensors");
    assert_eq!(found[1].source, "lmstudio");
    assert_eq!(found[1].format, "gguf");
    assert_eq!(found[1].name, "tiny-Q4_0");
    assert_eq!(
        found[1].bytes,
        std::fs::metadata(tiny_model()).unwrap().len()
    );
}

#[test]
fn ollama_blobs_are_found_by_their_manifests_and_open_as_gguf() {
    let (svc, _rx) = service(Store::in_memory().unwrap());
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join(".ollama/models");
    let hex = "ab12".repeat(16);
    let manifest = models.join("manifests/registry.ollama.ai/library/tiny/q4_0");
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    std::fs::create_dir_all(models.join("blobs")).unwrap();
    std::fs::write(
        &manifest,
        format!(
            r#"{{"schemaVersion": 2, "layers": [
                {{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"}},
                {{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:{hex}"}}]}}"#
        ),
    )
    .unwrap();
    let blob = models.join(format!("blobs/sha256-{hex}"));
    std::fs::copy(tiny_model(), &blob).unwrap();
    let found = minerva_service::library::found_models(svc.store(), Some(home.path()), &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (
            found[0].name.as_str(),
            found[0].source,
            found[0].format.as_str()
        ),
        ("tiny:q4_0", "ollama", "gguf")
    );
    // The blob has no extension: it opens by its GGUF magic.
    let card = svc.open(&found[0].path, "cpu", None).unwrap();
    assert_eq!(card.format, "gguf");
}
