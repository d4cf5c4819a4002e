use super::*;

fn sample_models() -> Models {
    let mut m = Models::default();
    let mut h = History::default();
    for t in [1.0e-3, 1.3e-3, 0.7e-3, 1.0e-3 / 3.0, 2.0f64.sqrt() * 1e-3] {
        h.add(t);
    }
    h.bytes = 2 << 20;
    let mut r = Regression::default();
    for (x, y) in [(1.0e9, 0.011), (2.0e9, 0.0205), (4.0e9, 0.0399)] {
        r.add(x, y);
    }
    let cm = m.codelets.entry("gemm".to_owned()).or_default();
    cm.history.insert((Arch::Cpu, 0xdead_beef), h);
    cm.history.insert((Arch::ScaledCpu(40), 7), h);
    cm.regression.insert(Arch::Device, r);
    // A name with the characters the format escapes.
    m.codelets
        .entry("odd name%\twith\nbreaks".to_owned())
        .or_default()
        .history
        .insert((Arch::Device, 0), History::default());
    m.bus.insert(
        (0, 1),
        Bus {
            latency: 9.5e-6,
            bandwidth: 2.4e10 / 3.0,
        },
    );
    m
}

fn bits(m: &Models) -> Vec<u64> {
    let mut v = Vec::new();
    for cm in m.codelets.values() {
        for h in cm.history.values() {
            v.extend([h.bytes, h.count, h.mean.to_bits(), h.m2.to_bits()]);
        }
        for r in cm.regression.values() {
            v.extend([
                r.count,
                r.sx.to_bits(),
                r.sy.to_bits(),
                r.sxx.to_bits(),
                r.sxy.to_bits(),
            ]);
        }
    }
    for b in m.bus.values() {
        v.extend([b.latency.to_bits(), b.bandwidth.to_bits()]);
    }
    v
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("starling-perfmodel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_saved_model_reads_back_bit_for_bit() {
    let m = sample_models();
    let dir = temp_dir("roundtrip");
    let file = machine_file(&dir);
    m.save(&file).unwrap();
    let back = Models::load(&file).unwrap();
    assert_eq!(back, m);
    assert_eq!(bits(&back), bits(&m));
    assert_eq!(back.render(), m.render());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn history_keeps_count_mean_and_deviation() {
    let mut h = History::default();
    for t in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
        h.add(t);
    }
    assert_eq!(h.count, 8);
    assert!((h.mean - 5.0).abs() < 1e-12);
    assert!((h.deviation() - 2.0).abs() < 1e-12);
    assert_eq!(
        h.predict(),
        None,
        "8 samples are fewer than the calibration minimum"
    );
    h.add(5.0);
    h.add(5.0);
    assert_eq!(h.predict(), Some(h.mean));
}

#[test]
fn a_regression_predicts_sizes_never_measured() {
    let mut r = Regression::default();
    // 1 ns per flop plus 50 µs.
    for i in 1..=CALIBRATION_SAMPLES {
        let x = i as f64 * 1e6;
        r.add(x, x * 1e-9 + 50e-6);
    }
    let t = r.predict(64e6).unwrap();
    assert!((t - (64e6 * 1e-9 + 50e-6)).abs() < 1e-9, "{t}");
    // One distinct size only: no line.
    let mut flat = Regression::default();
    for _ in 0..CALIBRATION_SAMPLES {
        flat.add(1e6, 1e-3);
    }
    assert_eq!(flat.predict(2e6), None);
}

#[test]
fn a_corrupted_line_is_an_error_naming_the_file_and_the_line() {
    let good = sample_models().render();
    let mut lines: Vec<&str> = good.lines().collect();
    let bad_line = lines.iter().position(|l| l.starts_with("history")).unwrap();
    lines[bad_line] = "history gemm cpu deadbeef 10 lots 0.1 0 0";
    let text = lines.join("\n");
    let e = Models::parse(&text, Path::new("/x/host.txt")).unwrap_err();
    assert_eq!(e.file, Path::new("/x/host.txt"));
    assert_eq!(e.line, bad_line + 1);
    assert!(
        e.to_string()
            .starts_with(&format!("/x/host.txt:{}: ", bad_line + 1)),
        "{e}"
    );
    for (bad, what) in [
        ("history gemm gpu deadbeef 10 1 0.1 0 0", "no arch"),
        ("history gemm cpu beef 10 1 0.1 0 0", "no footprint"),
        ("history gemm cpu deadbeef 10 1 NaN 0 0", "finite"),
        ("bus 0 1 -1 5", "negative"),
        ("wobble 1 2", "no record"),
        ("regression gemm cpu 1 2 3", "fields"),
    ] {
        lines[bad_line] = bad;
        let e = Models::parse(&lines.join("\n"), Path::new("f")).unwrap_err();
        assert_eq!(e.line, bad_line + 1, "{bad}");
        assert!(e.what.contains(what), "{bad}: {e}");
    }
}

#[test]
fn a_truncated_file_is_an_error_after_its_last_line() {
    let text = sample_models().render();
    let lines: Vec<&str> = text.lines().collect();
    // Cut before the `end` line: every record is well formed, yet the file is short.
    let cut = lines[..lines.len() - 1].join("\n");
    let e = Models::parse(&cut, Path::new("m.txt")).unwrap_err();
    assert_eq!(e.line, lines.len());
    assert!(e.what.contains("truncated"), "{e}");
    // A record lost with the `end` line kept: the count disagrees.
    let mut short = lines.clone();
    short.remove(3);
    let e = Models::parse(&short.join("\n"), Path::new("m.txt")).unwrap_err();
    assert_eq!(e.line, short.len());
    // Not a model file at all.
    let e = Models::parse("hello", Path::new("m.txt")).unwrap_err();
    assert_eq!(e.line, 1);
    let e = Models::parse("", Path::new("m.txt")).unwrap_err();
    assert_eq!(e.line, 1);
}

#[test]
fn a_missing_file_is_no_models_and_an_unwritable_folder_an_error_to_warn_about() {
    let dir = temp_dir("missing");
    assert_eq!(
        Models::load(&machine_file(&dir)).unwrap(),
        Models::default()
    );
    // A folder under a regular file cannot be made.
    std::fs::create_dir_all(&dir).unwrap();
    let blocker = dir.join("file");
    std::fs::write(&blocker, b"x").unwrap();
    assert!(sample_models().save(&machine_file(&blocker)).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn names_are_escaped_and_read_back() {
    for name in ["potrf", "", "a b", "100%", "tab\there", "%2"] {
        assert_eq!(unescape(&escape(name)).as_deref(), Some(name), "{name:?}");
        assert!(!escape(name).contains([' ', '\n', '\t']));
    }
    assert_eq!(unescape("%4"), None);
    assert_eq!(
        unescape("%41"),
        None,
        "only escaped characters may be escaped"
    );
}

#[test]
fn footprints_tell_sizes_and_their_order_apart() {
    let a = Footprint::of([8, 16]);
    assert_eq!(a, Footprint::of([8, 16]));
    assert_ne!(a.hash, Footprint::of([16, 8]).hash);
    assert_ne!(a.hash, Footprint::of([8, 17]).hash);
    assert_eq!(a.bytes, 24);
}

#[test]
fn arch_names_read_back() {
    for a in [Arch::Cpu, Arch::ScaledCpu(40), Arch::Device] {
        assert_eq!(Arch::parse(&a.to_string()), Some(a));
    }
    assert_eq!(Arch::cpu_at(100), Arch::Cpu);
    assert_eq!(Arch::cpu_at(50), Arch::ScaledCpu(50));
    assert_eq!(Arch::parse("cpu@100"), None);
}

#[test]
fn the_store_calibrates_as_asked() {
    let dir = temp_dir("store");
    let sizes = [8usize, 8];
    let auto = Store::open(Some(&dir), Calibrate::Auto);
    for _ in 0..CALIBRATION_SAMPLES + 5 {
        auto.record("k", None, Arch::Cpu, &sizes, 1e-3);
    }
    let fp = Footprint::of(sizes).hash;
    assert_eq!(
        lock(&auto.models)
            .history("k", Arch::Cpu, fp)
            .unwrap()
            .count,
        CALIBRATION_SAMPLES,
        "calibrate 0 stops adding samples once calibrated"
    );
    assert_eq!(auto.predict("k", None, Arch::Cpu, &sizes), Some(1e-3));
    assert_eq!(auto.predict("k", None, Arch::Device, &sizes), None);
    auto.save();
    drop(auto);
    // Opened again: the saved models; calibrate 1 adds every sample.
    let always = Store::open(Some(&dir), Calibrate::Always);
    always.record("k", None, Arch::Cpu, &sizes, 1e-3);
    assert_eq!(
        lock(&always.models)
            .history("k", Arch::Cpu, fp)
            .unwrap()
            .count,
        CALIBRATION_SAMPLES + 1
    );
    drop(always);
    // Calibrate 2 starts again.
    let reset = Store::open(Some(&dir), Calibrate::Reset);
    assert_eq!(reset.predict("k", None, Arch::Cpu, &sizes), None);
    drop(reset);
    // A regression formula predicts a size never run.
    let formula = PerfModel::regression(|s: &[usize]| s[0] as f64);
    let r = Store::open(Some(&dir.join("r")), Calibrate::Auto);
    for n in 1..=CALIBRATION_SAMPLES as usize {
        r.record("f", Some(&formula), Arch::Cpu, &[n * 1000], n as f64 * 1e-3);
    }
    let t = r
        .predict("f", Some(&formula), Arch::Cpu, &[50_000])
        .unwrap();
    assert!((t - 0.05).abs() < 1e-9, "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_of_one_process_share_one_store_per_file() {
    let dir = temp_dir("shared");
    let a = Store::open(Some(&dir), Calibrate::Auto);
    let b = Store::open(Some(&dir), Calibrate::Auto);
    assert!(Arc::ptr_eq(&a, &b));
    let other = Store::open(Some(&dir.join("other")), Calibrate::Auto);
    assert!(!Arc::ptr_eq(&a, &other));
}
