//! Compiles every `shaders/*.comp` (with `#include`s of shared `shaders/*.glsl`) to SPIR-V 1.5 for
//! Vulkan 1.2, and generates `shaders.rs` in `OUT_DIR`: an `enum Shader` with one variant per file
//! and its SPIR-V embedded with `include_bytes!`. A shader error fails the build with the shader's
//! file and line, as glslang reports them.
//!
//! The compiler is the system's `glslc` (`$GLSLC`, else `glslc` on `PATH`: the `glslc` package of
//! Debian and Ubuntu, or the Vulkan SDK); with the `shaderc-from-source` feature it is the
//! `shaderc` crate, which builds shaderc from source (about ten minutes on two cores). Both run
//! glslang with the same options: Vulkan 1.2, SPIR-V 1.5, optimized for performance, with debug
//! information.
//!
//! It also reads every `layout(constant_id = N) const TYPE NAME` of `shaders/` and generates
//! `pub mod spec` with `pub const NAME: usize = N;`, the ids the Rust side sets constants by. One
//! name has one id in every shader, and one shader (with its includes) gives each id one name:
//! anything else fails the build naming the constants and their files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let shader_dir = manifest.join("..").join("shaders");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={}", shader_dir.display());

    let mut entries: Vec<PathBuf> = match std::fs::read_dir(&shader_dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => fail(&format!(
            "cannot read the shader folder {}: {e}",
            shader_dir.display()
        )),
    };
    entries.sort();
    for p in &entries {
        println!("cargo:rerun-if-changed={}", p.display());
    }

    // Before compiling: a disagreement is reported with the constants' names and files.
    let spec_code = spec_module(&shader_dir, &entries);

    let compiler = compiler::Compiler::new(&shader_dir).unwrap_or_else(|e| fail(&e));
    let mut failures = Vec::new();
    let mut shaders = Vec::new();
    for path in entries
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "comp"))
    {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let spv = out_dir.join(format!("{stem}.spv"));
        match compiler.compile(&stem, &spv) {
            Ok(warnings) => {
                for line in warnings.lines().filter(|l| !l.trim().is_empty()) {
                    println!("cargo:warning={line}");
                }
                shaders.push(stem);
            }
            Err(e) => failures.push(e),
        }
    }
    if !failures.is_empty() {
        fail(&format!(
            "shader compilation failed:\n{}",
            failures.join("\n")
        ));
    }

    let mut code = String::new();
    code.push_str("/// Every compute shader in `shaders/`, compiled to SPIR-V at build time.\n");
    code.push_str(
        "#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\npub enum Shader {\n",
    );
    for s in &shaders {
        let _ = writeln!(code, "    {},", camel(s));
    }
    code.push_str("}\n\nimpl Shader {\n    /// Every shader, in file-name order.\n    pub const ALL: &'static [Shader] = &[");
    for s in &shaders {
        let _ = write!(code, "Shader::{}, ", camel(s));
    }
    code.push_str("];\n\n    /// The shader's file stem, used as its debug name.\n    pub fn name(self) -> &'static str {\n        match self {\n");
    for s in &shaders {
        let _ = writeln!(code, "            Shader::{} => \"{s}\",", camel(s));
    }
    code.push_str("        }\n    }\n\n    /// SPIR-V words as bytes (little-endian).\n    pub fn spirv(self) -> &'static [u8] {\n        match self {\n");
    for s in &shaders {
        let _ = writeln!(
            code,
            "            Shader::{} => include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{s}.spv\")),",
            camel(s)
        );
    }
    code.push_str("        }\n    }\n}\n");
    code.push_str(&spec_code);
    if let Err(e) = std::fs::write(out_dir.join("shaders.rs"), code) {
        fail(&format!("cannot write shaders.rs: {e}"));
    }
}

/// One `layout(constant_id = N) const TYPE NAME` declaration: its id, name and file.
struct SpecDecl {
    id: usize,
    name: String,
    file: String,
}

/// The declarations of `text` (the file `file`), in order.
fn spec_decls(text: &str, file: &str) -> Vec<SpecDecl> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("layout") else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(rest) = rest.strip_prefix('(') else {
            continue;
        };
        let Some((inside, after)) = rest.split_once(')') else {
            continue;
        };
        let Some((key, id)) = inside.split_once('=') else {
            continue;
        };
        if key.trim() != "constant_id" {
            continue;
        }
        let id: usize = id
            .trim()
            .parse()
            .unwrap_or_else(|_| fail(&format!("{file}: constant_id {id:?} is not a number")));
        // `const TYPE NAME = ...;`
        let words: Vec<&str> = after
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        match words[..] {
            ["const", _ty, name, ..] => out.push(SpecDecl {
                id,
                name: name.to_string(),
                file: file.to_string(),
            }),
            _ => fail(&format!(
                "{file}: cannot read the name of the specialization constant in {line:?}"
            )),
        }
    }
    out
}

/// The files a shader reads: itself and its `#include "..."`s, recursively, each once.
fn with_includes(dir: &Path, name: &str, seen: &mut Vec<String>) {
    if seen.iter().any(|s| s == name) {
        return;
    }
    seen.push(name.to_string());
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    for line in text.lines() {
        if let Some(inc) = line.trim().strip_prefix("#include") {
            with_includes(dir, inc.trim().trim_matches('"'), seen);
        }
    }
}

/// `pub mod spec`: every specialization constant's id by name, checked across the shaders.
fn spec_module(dir: &Path, entries: &[PathBuf]) -> String {
    let name_of = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string()
    };
    let mut decls: BTreeMap<String, Vec<SpecDecl>> = BTreeMap::new();
    for p in entries {
        let file = name_of(p);
        if !(file.ends_with(".comp") || file.ends_with(".glsl")) {
            continue;
        }
        let text = std::fs::read_to_string(p)
            .unwrap_or_else(|e| fail(&format!("cannot read shaders/{file}: {e}")));
        decls.insert(file.clone(), spec_decls(&text, &format!("shaders/{file}")));
    }
    let mut errors = Vec::new();
    // One name, one id, in every shader.
    let mut by_name: BTreeMap<&str, Vec<&SpecDecl>> = BTreeMap::new();
    for d in decls.values().flatten() {
        by_name.entry(&d.name).or_default().push(d);
    }
    for (name, ds) in &by_name {
        if ds.iter().any(|d| d.id != ds[0].id) {
            let at: Vec<String> = ds
                .iter()
                .map(|d| format!("constant_id {} in {}", d.id, d.file))
                .collect();
            errors.push(format!(
                "specialization constant {name} has different ids: {}; one name has one id in \
                 every shader (the Rust side sets it as spec::{name})",
                at.join(", ")
            ));
        }
    }
    // One shader and its includes: one name per id.
    for p in entries {
        let file = name_of(p);
        if !file.ends_with(".comp") {
            continue;
        }
        let mut files = Vec::new();
        with_includes(dir, &file, &mut files);
        let mut by_id: BTreeMap<usize, Vec<&SpecDecl>> = BTreeMap::new();
        for d in files.iter().filter_map(|f| decls.get(f)).flatten() {
            by_id.entry(d.id).or_default().push(d);
        }
        for (id, ds) in by_id {
            if ds.iter().any(|d| d.name != ds[0].name) {
                let at: Vec<String> = ds
                    .iter()
                    .map(|d| format!("{} in {}", d.name, d.file))
                    .collect();
                errors.push(format!(
                    "shaders/{file}: constant_id {id} is declared twice: {}",
                    at.join(" and ")
                ));
            }
        }
    }
    if !errors.is_empty() {
        fail(&format!(
            "specialization constants disagree:\n{}",
            errors.join("\n")
        ));
    }
    let mut code = String::from(
        "\n/// Specialization constant ids by name, read by `build.rs` from every\n\
         /// `layout(constant_id = N) const TYPE NAME` in `shaders/` (one id per name in every shader).\n\
         pub mod spec {\n",
    );
    let mut count = 0;
    for (name, ds) in &by_name {
        let mut files: Vec<&str> = ds.iter().map(|d| d.file.as_str()).collect();
        files.dedup();
        let _ = writeln!(
            code,
            "    /// `{name}` in {}.\n    pub const {name}: usize = {};",
            files.join(", "),
            ds[0].id
        );
        count = count.max(ds[0].id + 1);
    }
    let _ = writeln!(
        code,
        "    /// One more than the largest id: the constants a pipeline description carries.\n    pub const COUNT: usize = {count};\n}}"
    );
    code
}

fn camel(stem: &str) -> String {
    stem.split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

fn fail(msg: &str) -> ! {
    eprintln!("{msg}");
    std::process::exit(1)
}

#[cfg(not(feature = "shaderc-from-source"))]
mod compiler {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The system's `glslc`, run from the repository's root so that its messages name
    /// `shaders/NAME.comp`.
    pub struct Compiler {
        glslc: PathBuf,
        root: PathBuf,
    }

    impl Compiler {
        pub fn new(shader_dir: &Path) -> Result<Compiler, String> {
            println!("cargo:rerun-if-env-changed=GLSLC");
            let glslc = match std::env::var_os("GLSLC") {
                Some(p) => PathBuf::from(p),
                None => std::env::var_os("PATH")
                    .into_iter()
                    .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
                    .map(|d| d.join("glslc"))
                    .find(|p| p.is_file())
                    .ok_or_else(|| {
                        "no glslc to compile the shaders: install it (apt-get install glslc, or \
                         the Vulkan SDK; scripts/setup.sh does), point GLSLC at it, or build \
                         with `--features shaderc-from-source` to compile shaderc from source \
                         (about ten minutes)"
                            .to_string()
                    })?,
            };
            let root = shader_dir
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| format!("{} has no parent folder", shader_dir.display()))?;
            Ok(Compiler { glslc, root })
        }

        /// Compiles `shaders/STEM.comp` into `spv`; its warnings, or its errors.
        pub fn compile(&self, stem: &str, spv: &Path) -> Result<String, String> {
            let out = Command::new(&self.glslc)
                .current_dir(&self.root)
                .args([
                    "-fshader-stage=compute",
                    "--target-env=vulkan1.2",
                    "--target-spv=spv1.5",
                    "-O",
                    "-g",
                    "-I",
                    "shaders",
                    "-o",
                ])
                .arg(spv)
                .arg(format!("shaders/{stem}.comp"))
                .output()
                .map_err(|e| format!("cannot run {}: {e}", self.glslc.display()))?;
            let messages = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() {
                Ok(messages)
            } else {
                Err(messages)
            }
        }
    }
}

#[cfg(feature = "shaderc-from-source")]
mod compiler {
    use std::path::{Path, PathBuf};

    /// The `shaderc` crate, built from source.
    pub struct Compiler {
        shaderc: shaderc::Compiler,
        dir: PathBuf,
    }

    impl Compiler {
        pub fn new(shader_dir: &Path) -> Result<Compiler, String> {
            let shaderc = shaderc::Compiler::new().map_err(|e| format!("shaderc: {e}"))?;
            Ok(Compiler {
                shaderc,
                dir: shader_dir.to_path_buf(),
            })
        }

        /// Compiles `shaders/STEM.comp` into `spv`; its warnings, or its errors.
        pub fn compile(&self, stem: &str, spv: &Path) -> Result<String, String> {
            let display = format!("shaders/{stem}.comp");
            let source = std::fs::read_to_string(self.dir.join(format!("{stem}.comp")))
                .map_err(|e| format!("cannot read {display}: {e}"))?;
            let mut options =
                shaderc::CompileOptions::new().map_err(|e| format!("shaderc: {e}"))?;
            options.set_target_env(
                shaderc::TargetEnv::Vulkan,
                shaderc::EnvVersion::Vulkan1_2 as u32,
            );
            options.set_target_spirv(shaderc::SpirvVersion::V1_5);
            options.set_source_language(shaderc::SourceLanguage::GLSL);
            options.set_optimization_level(shaderc::OptimizationLevel::Performance);
            options.set_generate_debug_info();
            let dir = self.dir.clone();
            options.set_include_callback(move |name, _ty, _from, _depth| include(&dir, name));
            let artifact = self
                .shaderc
                .compile_into_spirv(
                    &source,
                    shaderc::ShaderKind::Compute,
                    &display,
                    "main",
                    Some(&options),
                )
                .map_err(|e| e.to_string())?;
            std::fs::write(spv, artifact.as_binary_u8())
                .map_err(|e| format!("cannot write {}: {e}", spv.display()))?;
            Ok(artifact.get_warning_messages())
        }
    }

    fn include(dir: &Path, name: &str) -> Result<shaderc::ResolvedInclude, String> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(content) => Ok(shaderc::ResolvedInclude {
                resolved_name: format!("shaders/{name}"),
                content,
            }),
            Err(e) => Err(format!("cannot include shaders/{name}: {e}")),
        }
    }
}
