//! The six execution knobs of docs/design.md and the two presets over them.
//!
//! | knob | generic preset | fused preset |
//! |---|---|---|
//! | `submit` | `dispatch` | `token` |
//! | `sync` | `submit` | `token` (`chained`: one step ahead, the token passed on the GPU) |
//! | `descriptors` | `per-dispatch` | `bound-once` |
//! | `barriers` | `full` | `tracked` |
//! | `kernels` | `primitive` | `fused` |
//! | `recording` | `every-token` | `once` |

use std::fmt;
use std::str::FromStr;

/// When recorded work is submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Submit {
    /// One submit per dispatch (or transfer command).
    Dispatch,
    /// One submit per N dispatches.
    Every(u32),
    /// One submit per transformer layer (the embedding joins the first, the head the last).
    PerLayer,
    /// One submit per token.
    Token,
}

/// When the host waits for the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sync {
    /// After every submit.
    Submit,
    /// Only before the token's readback.
    Token,
    /// One token ahead: the next decode step is submitted before the host waits for this one,
    /// and reads its input token on the GPU where this step leaves its argmax, so the GPU runs
    /// the steps back to back with no host round trip between them (needs the GPU argmax:
    /// `--kernels fused` or `persistent`).
    Chained,
}

/// How buffers are bound to dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Descriptors {
    /// A set allocated and written for every dispatch each time it is recorded.
    PerDispatch,
    /// A set allocated and written the first time a (pipeline, buffers) combination is recorded,
    /// then reused.
    Cached,
    /// Every set allocated and written once when the program is built; none per token.
    BoundOnce,
    /// `VK_KHR_push_descriptor`: buffers pushed with every dispatch.
    Push,
}

/// How hazards between dispatches are handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Barriers {
    /// A full memory barrier after every dispatch.
    Full,
    /// A barrier only before a dispatch that touches a range written (or writes a range read)
    /// since the last barrier.
    Tracked,
}

/// What a dispatch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernels {
    /// One primitive per dispatch; KV append by its own kernel; host argmax.
    Primitive,
    /// Fused hot-path kernels; GPU argmax with a 4-byte readback.
    Fused,
    /// One dispatch per decode token: every phase of every layer in one kernel whose workgroups
    /// meet at device-scope barriers (`shaders/persistent.comp`); prompt steps as `fused`.
    Persistent,
}

/// When command buffers are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recording {
    EveryToken,
    /// Recorded at the first decode token, then replayed.
    Once,
}

/// A complete setting of the six knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Knobs {
    pub submit: Submit,
    pub sync: Sync,
    pub descriptors: Descriptors,
    pub barriers: Barriers,
    pub kernels: Kernels,
    pub recording: Recording,
}

/// The named presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Mode {
    /// Generic-primitive: how a generic array framework lowers decode.
    Generic,
    /// Fused token-region: one recorded region per token with fused hot-path kernels.
    Fused,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Generic => "generic",
            Mode::Fused => "fused",
        }
    }
}

impl Knobs {
    pub fn preset(mode: Mode) -> Knobs {
        match mode {
            Mode::Generic => Knobs {
                submit: Submit::Dispatch,
                sync: Sync::Submit,
                descriptors: Descriptors::PerDispatch,
                barriers: Barriers::Full,
                kernels: Kernels::Primitive,
                recording: Recording::EveryToken,
            },
            Mode::Fused => Knobs {
                submit: Submit::Token,
                sync: Sync::Token,
                descriptors: Descriptors::BoundOnce,
                barriers: Barriers::Tracked,
                kernels: Kernels::Fused,
                recording: Recording::Once,
            },
        }
    }

    /// The preset these knobs equal, if any.
    pub fn mode_name(&self) -> &'static str {
        if *self == Knobs::preset(Mode::Generic) {
            "generic"
        } else if *self == Knobs::preset(Mode::Fused) {
            "fused"
        } else {
            "custom"
        }
    }

    /// Refuses combinations that cannot work, with one sentence.
    pub fn validate(&self, push_descriptors_supported: bool) -> Result<(), String> {
        if self.recording == Recording::Once && self.kernels == Kernels::Primitive {
            return Err("--recording once needs --kernels fused: the primitive attention's grid grows with the KV \
                        length every token, so a recorded command buffer cannot be replayed"
                .into());
        }
        if self.descriptors == Descriptors::Push && !push_descriptors_supported {
            return Err("--descriptors push needs VK_KHR_push_descriptor, which this device lacks; use per-dispatch, \
                        cached or bound-once"
                .into());
        }
        if self.sync == Sync::Chained && self.kernels == Kernels::Primitive {
            return Err("--sync chained passes each token on the GPU from the step's argmax, which --kernels primitive \
                        leaves to the host; use --kernels fused or persistent"
                .into());
        }
        if let Submit::Every(0) = self.submit {
            return Err("--submit every:N needs N >= 1".into());
        }
        Ok(())
    }

    /// The knob values as the trace records them.
    pub fn to_trace(&self) -> profiler::trace::Knobs {
        profiler::trace::Knobs {
            mode: self.mode_name().into(),
            submit: self.submit.to_string(),
            sync: self.sync.to_string(),
            descriptors: self.descriptors.to_string(),
            barriers: self.barriers.to_string(),
            kernels: self.kernels.to_string(),
            recording: self.recording.to_string(),
        }
    }

    /// The knob values neither preset uses, each flipped alone from the preset it extends:
    /// `(preset, knob name, value, knobs)`. The ablation and the test matrix run them beside
    /// [`Knobs::single_flips`], so every value of every knob is measured and checked.
    pub fn beyond_presets() -> Vec<(&'static str, &'static str, String, Knobs)> {
        let (g, f) = (Knobs::preset(Mode::Generic), Knobs::preset(Mode::Fused));
        let mut out = vec![];
        for submit in [Submit::Every(4), Submit::PerLayer] {
            out.push(("fused", "submit", submit.to_string(), Knobs { submit, ..f }));
        }
        out.push((
            "generic",
            "descriptors",
            Descriptors::Push.to_string(),
            Knobs {
                descriptors: Descriptors::Push,
                ..g
            },
        ));
        out.push((
            "fused",
            "descriptors",
            Descriptors::Cached.to_string(),
            Knobs {
                descriptors: Descriptors::Cached,
                ..f
            },
        ));
        out.push((
            "fused",
            "sync",
            Sync::Chained.to_string(),
            Knobs {
                sync: Sync::Chained,
                ..f
            },
        ));
        out.push((
            "fused",
            "kernels",
            Kernels::Persistent.to_string(),
            Knobs {
                kernels: Kernels::Persistent,
                ..f
            },
        ));
        out
    }

    /// Every knob setting one flip away from `self` (used by the ablation and the test matrix):
    /// `(knob name, value, knobs)`.
    pub fn single_flips(&self, toward: &Knobs) -> Vec<(&'static str, String, Knobs)> {
        let mut out = vec![];
        if self.submit != toward.submit {
            out.push((
                "submit",
                toward.submit.to_string(),
                Knobs {
                    submit: toward.submit,
                    ..*self
                },
            ));
        }
        if self.sync != toward.sync {
            out.push((
                "sync",
                toward.sync.to_string(),
                Knobs {
                    sync: toward.sync,
                    ..*self
                },
            ));
        }
        if self.descriptors != toward.descriptors {
            out.push((
                "descriptors",
                toward.descriptors.to_string(),
                Knobs {
                    descriptors: toward.descriptors,
                    ..*self
                },
            ));
        }
        if self.barriers != toward.barriers {
            out.push((
                "barriers",
                toward.barriers.to_string(),
                Knobs {
                    barriers: toward.barriers,
                    ..*self
                },
            ));
        }
        if self.kernels != toward.kernels {
            out.push((
                "kernels",
                toward.kernels.to_string(),
                Knobs {
                    kernels: toward.kernels,
                    ..*self
                },
            ));
        }
        if self.recording != toward.recording {
            out.push((
                "recording",
                toward.recording.to_string(),
                Knobs {
                    recording: toward.recording,
                    ..*self
                },
            ));
        }
        out
    }
}

impl fmt::Display for Knobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "submit={} sync={} descriptors={} barriers={} kernels={} recording={}",
            self.submit, self.sync, self.descriptors, self.barriers, self.kernels, self.recording
        )
    }
}

macro_rules! simple_knob {
    ($ty:ident, $flag:literal, $( $variant:ident => $name:literal ),+ ) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $( $ty::$variant => $name ),+ })
            }
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $name => Ok($ty::$variant), )+
                    _ => Err(format!(concat!("unknown ", $flag, " value {:?}; expected one of: {}"), s,
                        [$( $name ),+].join(", "))),
                }
            }
        }
    };
}

simple_knob!(Sync, "--sync", Submit => "submit", Token => "token", Chained => "chained");
simple_knob!(Descriptors, "--descriptors", PerDispatch => "per-dispatch", Cached => "cached",
    BoundOnce => "bound-once", Push => "push");
simple_knob!(Barriers, "--barriers", Full => "full", Tracked => "tracked");
simple_knob!(Kernels, "--kernels", Primitive => "primitive", Fused => "fused",
    Persistent => "persistent");
simple_knob!(Recording, "--recording", EveryToken => "every-token", Once => "once");

impl fmt::Display for Submit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Submit::Dispatch => f.write_str("dispatch"),
            Submit::Every(n) => write!(f, "every:{n}"),
            Submit::PerLayer => f.write_str("per-layer"),
            Submit::Token => f.write_str("token"),
        }
    }
}

impl FromStr for Submit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dispatch" => Ok(Submit::Dispatch),
            "per-layer" => Ok(Submit::PerLayer),
            "token" => Ok(Submit::Token),
            _ => match s.strip_prefix("every:").map(str::parse::<u32>) {
                Some(Ok(n)) if n >= 1 => Ok(Submit::Every(n)),
                _ => Err(format!(
                    "unknown --submit value {s:?}; expected dispatch, every:N (N >= 1), per-layer or token"
                )),
            },
        }
    }
}

/// The knob flags every GPU command takes: a preset and per-knob overrides.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct KnobArgs {
    /// When recorded work is submitted: dispatch | every:N | per-layer | token.
    #[arg(long)]
    pub submit: Option<Submit>,
    /// When the host waits: submit | token | chained (one step ahead, the token passed on the GPU).
    #[arg(long)]
    pub sync: Option<Sync>,
    /// How buffers are bound: per-dispatch | cached | bound-once | push.
    #[arg(long)]
    pub descriptors: Option<Descriptors>,
    /// Hazard handling: full | tracked.
    #[arg(long)]
    pub barriers: Option<Barriers>,
    /// What a dispatch does: primitive | fused | persistent (one dispatch per decode token).
    #[arg(long)]
    pub kernels: Option<Kernels>,
    /// When command buffers are recorded: every-token | once.
    #[arg(long)]
    pub recording: Option<Recording>,
}

impl KnobArgs {
    /// The preset `mode` with the given overrides applied.
    pub fn resolve(&self, mode: Mode) -> Knobs {
        let p = Knobs::preset(mode);
        Knobs {
            submit: self.submit.unwrap_or(p.submit),
            sync: self.sync.unwrap_or(p.sync),
            descriptors: self.descriptors.unwrap_or(p.descriptors),
            barriers: self.barriers.unwrap_or(p.barriers),
            kernels: self.kernels.unwrap_or(p.kernels),
            recording: self.recording.unwrap_or(p.recording),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        for s in ["dispatch", "every:4", "per-layer", "token"] {
            assert_eq!(
                s.parse::<Submit>().map(|v| v.to_string()),
                Ok(s.to_string())
            );
        }
        assert!("every:0".parse::<Submit>().is_err());
        assert!("sometimes".parse::<Sync>().unwrap_err().contains("--sync"));
    }

    #[test]
    fn presets_are_named_and_flips_are_single() {
        let g = Knobs::preset(Mode::Generic);
        let f = Knobs::preset(Mode::Fused);
        assert_eq!(g.mode_name(), "generic");
        assert_eq!(f.mode_name(), "fused");
        let flips = g.single_flips(&f);
        assert_eq!(flips.len(), 6);
        for (_, _, k) in flips {
            assert_eq!(k.mode_name(), "custom");
        }
    }

    #[test]
    fn values_beyond_the_presets_are_single_flips_and_cover_every_value() {
        let mut kernels = vec![];
        for (preset, knob, value, k) in Knobs::beyond_presets() {
            let base = match preset {
                "generic" => Knobs::preset(Mode::Generic),
                _ => Knobs::preset(Mode::Fused),
            };
            assert_eq!(
                k.to_string()
                    .split(' ')
                    .zip(base.to_string().split(' '))
                    .filter(|(a, b)| a != b)
                    .count(),
                1,
                "{knob} {value}"
            );
            if knob == "kernels" {
                kernels.push(k.kernels);
            }
        }
        assert_eq!(kernels, vec![Kernels::Persistent]);
    }

    #[test]
    fn chaining_without_the_gpu_argmax_is_refused() {
        let k = Knobs {
            sync: Sync::Chained,
            ..Knobs::preset(Mode::Generic)
        };
        assert!(k.validate(true).unwrap_err().contains("--sync chained"));
        let f = Knobs {
            sync: Sync::Chained,
            ..Knobs::preset(Mode::Fused)
        };
        assert_eq!(f.validate(true), Ok(()));
        assert_eq!("chained".parse::<Sync>(), Ok(Sync::Chained));
    }

    #[test]
    fn replay_with_primitive_kernels_is_refused() {
        let k = Knobs {
            recording: Recording::Once,
            ..Knobs::preset(Mode::Generic)
        };
        assert!(k.validate(true).unwrap_err().contains("--recording once"));
    }
}
