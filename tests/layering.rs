//! Which crate may import which (`docs/architecture.md`, "Which crate may import which,
//! and why"), checked on the sources: no build, no MPI, no GPU, a few milliseconds.
//!
//! * Each crate's manifest names only the workspace crates below it: the core none, the
//!   runtime the core, each adapter the core and the runtime, never the facade nor the
//!   other adapter.
//! * The adapters use the runtime through its contract modules only: `starling-mpi`
//!   through `starling_std::transport`, `starling-gpu` through `starling_std::device`
//!   and the data layouts of `starling_std::interfaces`. Every path that starts with
//!   `starling_std::` in their `src/` (outside comments) is checked, `use` groups
//!   included. Their tests and examples may use the whole runtime: that is inward too.

use std::path::{Path, PathBuf};

/// The workspace crates each crate may depend on (any section of its manifest).
const DEPENDENCIES: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("std-adapter", &["starling-core"]),
    ("mpi-adapter", &["starling-core", "starling-std"]),
    ("gpu-adapter", &["starling-core", "starling-std"]),
];

/// The modules of `starling_std` each adapter's `src/` may name.
const CONTRACTS: &[(&str, &[&str])] = &[
    ("mpi-adapter", &["transport"]),
    ("gpu-adapter", &["device", "interfaces"]),
];

/// The workspace's crates, as manifests name them.
const WORKSPACE: &[&str] = &[
    "starling",
    "starling-core",
    "starling-std",
    "starling-mpi",
    "starling-gpu",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace crates that `manifest` depends on, in any dependency section.
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line.contains("dependencies");
            continue;
        }
        if !in_deps || line.starts_with('#') {
            continue;
        }
        let name = line
            .split(['=', '.', ' '])
            .next()
            .unwrap_or_default()
            .trim_matches('"');
        if WORKSPACE.contains(&name) {
            found.push(name.to_owned());
        }
    }
    found
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The code of `line`, without its `//` comment (doc comments included).
fn code(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// The first module of each `starling_std::` path in `text` (code only): `a` for
/// `starling_std::a::B`, `a` and `b` for `starling_std::{a::B, b}`, and the item's own
/// name for `starling_std::Item`.
fn std_modules(text: &str) -> Vec<String> {
    let code: String = text.lines().map(code).collect::<Vec<_>>().join("\n");
    let mut found = Vec::new();
    let key = "starling_std::";
    let mut rest = code.as_str();
    while let Some(i) = rest.find(key) {
        rest = &rest[i + key.len()..];
        let after = rest.trim_start();
        if let Some(group) = after.strip_prefix('{') {
            // The top-level names of the group, up to its closing brace.
            let (mut depth, mut name, mut names) = (0usize, String::new(), Vec::new());
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(core::mem::take(&mut name));
                        at_start = true;
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && at_start {
                    if c.is_alphanumeric() || c == '_' {
                        name.push(c);
                    } else if !name.is_empty() {
                        at_start = false;
                    }
                }
            }
            names.push(name);
            found.extend(names.into_iter().filter(|n| !n.is_empty()));
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
}

#[test]
fn each_crate_depends_only_on_the_workspace_crates_below_it() {
    for (dir, allowed) in DEPENDENCIES {
        let path = root().join(dir).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path).expect("the manifest");
        for dep in workspace_dependencies(&manifest) {
            assert!(
                allowed.contains(&dep.as_str()),
                "{dir} depends on {dep}; it may depend on {allowed:?} only (docs/architecture.md)"
            );
        }
    }
}

#[test]
fn the_adapters_use_the_runtime_through_its_contract_modules_only() {
    for (dir, allowed) in CONTRACTS {
        let mut files = Vec::new();
        sources(&root().join(dir).join("src"), &mut files);
        assert!(!files.is_empty(), "{dir}/src has sources");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for module in std_modules(&text) {
                assert!(
                    allowed.contains(&module.as_str()),
                    "{} names starling_std::{module}; {dir} may use starling_std::{allowed:?} \
                     only (docs/architecture.md, \"Which crate may import which, and why\")",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn the_check_reads_paths_groups_and_skips_comments() {
    let text = "use starling_std::transport::{Completion, Transport};\n\
                use starling_std::{device::{Buffers, Codelet}, interfaces, Context};\n\
                /// [`Context`](starling_std::Context) in a doc comment\n\
                let k: Option<Arc<starling_std::device::Kernel>> = None; // starling_std::rank\n\
                fn f(x: &starling_std::RankRunner) {}\n";
    assert_eq!(
        std_modules(text),
        [
            "transport",
            "device",
            "interfaces",
            "Context",
            "device",
            "RankRunner"
        ]
    );
    let manifest = "[dependencies]\nstarling-core.workspace = true\nstarling-std = { path = \"x\" }\n\
                    # starling = { path = \"..\" }\nthiserror.workspace = true\n\
                    [dev-dependencies]\nstarling = { workspace = true }\n[lints]\nstarling-mpi = 1\n";
    assert_eq!(
        workspace_dependencies(manifest),
        ["starling-core", "starling-std", "starling"]
    );
}
