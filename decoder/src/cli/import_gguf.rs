//! `decoder import_gguf` (being written).

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`decoder import_gguf` is not written yet")
}
