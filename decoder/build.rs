//! Compiles every `shaders/*.comp` (with `#include`s of shared `shaders/*.glsl`) to SPIR-V 1.5 for
//! Vulkan 1.2 using shaderc, and generates `shaders.rs` in `OUT_DIR`: an `enum Shader` with one
//! variant per file and its SPIR-V embedded with `include_bytes!`. A shader error fails the build
//! with the shader's file and line, as glslang reports them.

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

    let compiler = shaderc::Compiler::new().unwrap_or_else(|e| fail(&format!("shaderc: {e}")));
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
        let display = format!("shaders/{stem}.comp");
        let source = match std::fs::read_to_string(path) {
            Ok(s) => s,
            Err(e) => fail(&format!("cannot read {display}: {e}")),
        };
        let mut options =
            shaderc::CompileOptions::new().unwrap_or_else(|e| fail(&format!("shaderc: {e}")));
        options.set_target_env(
            shaderc::TargetEnv::Vulkan,
            shaderc::EnvVersion::Vulkan1_2 as u32,
        );
        options.set_target_spirv(shaderc::SpirvVersion::V1_5);
        options.set_source_language(shaderc::SourceLanguage::GLSL);
        options.set_optimization_level(shaderc::OptimizationLevel::Performance);
        options.set_generate_debug_info();
        let dir = shader_dir.clone();
        options.set_include_callback(move |name, _ty, _from, _depth| include(&dir, name));
        match compiler.compile_into_spirv(
            &source,
            shaderc::ShaderKind::Compute,
            &display,
            "main",
            Some(&options),
        ) {
            Ok(artifact) => {
                if artifact.get_num_warnings() > 0 {
                    for line in artifact.get_warning_messages().lines() {
                        println!("cargo:warning={line}");
                    }
                }
                let spv = out_dir.join(format!("{stem}.spv"));
                if let Err(e) = std::fs::write(&spv, artifact.as_binary_u8()) {
                    fail(&format!("cannot write {}: {e}", spv.display()));
                }
                shaders.push(stem);
            }
            Err(e) => failures.push(e.to_string()),
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
    if let Err(e) = std::fs::write(out_dir.join("shaders.rs"), code) {
        fail(&format!("cannot write shaders.rs: {e}"));
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
