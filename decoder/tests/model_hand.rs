//! A one-layer model with hand-chosen weights, checked against values computed by hand.
//!
//! hidden 2, two query heads sharing one KV head (GQA), head_dim 2, intermediate 1, vocab 3,
//! rope_theta 10000 (so with head_dim 2 the one RoPE angle is the position itself).
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use decoder::model::reference::forward_full;
use decoder::model::{Arch, LayerWeights, ModelConfig, Reference, Tensor, WeightDtype, Weights};

const EPS: f64 = 1e-5;

fn config(arch: Arch) -> ModelConfig {
    ModelConfig {
        arch,
        hidden: 2,
        layers: 1,
        heads: 2,
        kv_heads: 1,
        head_dim: 2,
        intermediate: 1,
        vocab: 3,
        rms_norm_eps: EPS as f32,
        rope_theta: 10000.0,
        rope_scaling: None,
        max_position_embeddings: 16,
        tie_word_embeddings: false,
        qk_norm: arch == Arch::Qwen3,
        dtype: WeightDtype::F32,
        bos_token_id: None,
        eos_token_ids: vec![],
    }
}

const Q_NORM: [f32; 2] = [1.5, 0.5];
const K_NORM: [f32; 2] = [2.0, 1.0];

fn weights(arch: Arch) -> Weights {
    let t = |name: &str, shape: &[usize], data: &[f32]| Tensor::new(name, shape, data.to_vec());
    let p = "model.layers.0";
    Weights {
        // token 0 = [1, 0], token 1 = [0, 2], token 2 = [1, 1]
        embed_tokens: t(
            "model.embed_tokens.weight",
            &[3, 2],
            &[1., 0., 0., 2., 1., 1.],
        ),
        layers: vec![LayerWeights {
            input_layernorm: t(&format!("{p}.input_layernorm.weight"), &[2], &[1., 2.]),
            // head 0 = identity, head 1 = swap
            q_proj: t(
                &format!("{p}.self_attn.q_proj.weight"),
                &[4, 2],
                &[1., 0., 0., 1., 0., 1., 1., 0.],
            ),
            k_proj: t(
                &format!("{p}.self_attn.k_proj.weight"),
                &[2, 2],
                &[1., 0., 0., 1.],
            ),
            // v = [xb0, -xb1]
            v_proj: t(
                &format!("{p}.self_attn.v_proj.weight"),
                &[2, 2],
                &[1., 0., 0., -1.],
            ),
            // out = [o0_0 + o1_1, o0_1 + o1_0]
            o_proj: t(
                &format!("{p}.self_attn.o_proj.weight"),
                &[2, 4],
                &[1., 0., 0., 1., 0., 1., 1., 0.],
            ),
            q_norm: (arch == Arch::Qwen3)
                .then(|| t(&format!("{p}.self_attn.q_norm.weight"), &[2], &Q_NORM)),
            k_norm: (arch == Arch::Qwen3)
                .then(|| t(&format!("{p}.self_attn.k_norm.weight"), &[2], &K_NORM)),
            post_attention_layernorm: t(
                &format!("{p}.post_attention_layernorm.weight"),
                &[2],
                &[1., 1.],
            ),
            gate_proj: t(&format!("{p}.mlp.gate_proj.weight"), &[1, 2], &[1., 0.]),
            up_proj: t(&format!("{p}.mlp.up_proj.weight"), &[1, 2], &[0., 1.]),
            down_proj: t(&format!("{p}.mlp.down_proj.weight"), &[2, 1], &[1., -1.]),
        }],
        norm: t("model.norm.weight", &[2], &[1., 1.]),
        lm_head: Some(t("lm_head.weight", &[3, 2], &[1., 0., 0., 1., 1., 1.])),
    }
}

type V2 = [f64; 2];

fn rms(x: V2, w: [f32; 2]) -> V2 {
    let inv = 1.0 / ((x[0] * x[0] + x[1] * x[1]) / 2.0 + EPS).sqrt();
    [f64::from(w[0]) * x[0] * inv, f64::from(w[1]) * x[1] * inv]
}

/// Rotate-half RoPE of a 2-wide head: the angle is the position.
fn rot(v: V2, pos: usize) -> V2 {
    let (c, s) = ((pos as f64).cos(), (pos as f64).sin());
    [v[0] * c - v[1] * s, v[1] * c + v[0] * s]
}

fn dot(a: V2, b: V2) -> f64 {
    a[0] * b[0] + a[1] * b[1]
}

/// The model computed by hand for a token sequence: every position's logits.
fn by_hand(arch: Arch, tokens: &[usize]) -> Vec<[f64; 3]> {
    let embed: [V2; 3] = [[1., 0.], [0., 2.], [1., 1.]];
    let (mut keys, mut values): (Vec<V2>, Vec<V2>) = (vec![], vec![]);
    let mut out = vec![];
    for (pos, &t) in tokens.iter().enumerate() {
        let mut x = embed[t];
        let xb = rms(x, [1., 2.]);
        let (mut q0, mut q1, mut k) = ([xb[0], xb[1]], [xb[1], xb[0]], [xb[0], xb[1]]);
        let v = [xb[0], -xb[1]];
        if arch == Arch::Qwen3 {
            q0 = rms(q0, Q_NORM);
            q1 = rms(q1, Q_NORM);
            k = rms(k, K_NORM);
        }
        let (q0, q1) = (rot(q0, pos), rot(q1, pos));
        keys.push(rot(k, pos));
        values.push(v);
        // Both query heads read the one KV head.
        let head = |q: V2| -> V2 {
            let scores: Vec<f64> = keys.iter().map(|k| dot(q, *k) / 2f64.sqrt()).collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            let mut o = [0.0; 2];
            for (p, v) in e.iter().zip(&values) {
                o[0] += p / sum * v[0];
                o[1] += p / sum * v[1];
            }
            o
        };
        let (o0, o1) = (head(q0), head(q1));
        x = [x[0] + o0[0] + o1[1], x[1] + o0[1] + o1[0]];
        let xb = rms(x, [1., 1.]);
        let m = xb[0] / (1.0 + (-xb[0]).exp()) * xb[1];
        x = [x[0] + m, x[1] - m];
        let f = rms(x, [1., 1.]);
        out.push([f[0], f[1], f[0] + f[1]]);
    }
    out
}

fn check(arch: Arch) {
    let config = config(arch);
    let weights = weights(arch);
    let tokens = [0usize, 1, 2, 2, 1, 0];
    let expected = by_hand(arch, &tokens);
    let mut reference = Reference::new(&config, &weights, tokens.len()).unwrap();
    for (pos, &t) in tokens.iter().enumerate() {
        let logits = reference.forward(t as u32, pos).unwrap().to_vec();
        for (i, (&got, &want)) in logits.iter().zip(&expected[pos]).enumerate() {
            // f32 against f64 arithmetic on values of order 1.
            assert!(
                (f64::from(got) - want).abs() < 1e-5,
                "{arch:?} pos {pos} logit {i}: {got} vs {want}"
            );
        }
        let ids: Vec<u32> = tokens[..=pos].iter().map(|&t| t as u32).collect();
        let full = forward_full(&config, &weights, &ids).unwrap();
        assert!(full.iter().zip(&logits).all(|(a, b)| (a - b).abs() < 1e-6));
    }
}

#[test]
fn first_position_by_hand() {
    // Position 0, token 0 = [1, 0]: rmsnorm -> [sqrt 2, 0] (times [1, 2]); one key, so both
    // heads output v = [sqrt 2, 0]; o_proj -> [sqrt 2, sqrt 2]; x = [1 + sqrt 2, sqrt 2];
    // rmsnorm -> [1.22026, 0.71481]; silu(1.22026) * 0.71481 = 0.67348;
    // x = [3.08769, 0.74073]; final rmsnorm -> [1.37519, 0.32990]; lm_head adds a third
    // logit, their sum.
    let config = config(Arch::Llama);
    let weights = weights(Arch::Llama);
    let mut reference = Reference::new(&config, &weights, 1).unwrap();
    let logits = reference.forward(0, 0).unwrap();
    let want = [1.375_194, 0.329_904, 1.705_098];
    for (got, want) in logits.iter().zip(want) {
        assert!((got - want).abs() < 1e-5, "{logits:?} vs {want}");
    }
}

#[test]
fn llama_layer_matches_hand_computation() {
    check(Arch::Llama);
}

#[test]
fn qwen3_layer_with_qk_norm_matches_hand_computation() {
    check(Arch::Qwen3);
}

#[test]
fn weights_that_do_not_match_the_config_are_rejected() {
    let config = config(Arch::Llama);
    let mut weights = weights(Arch::Llama);
    weights.layers[0].k_proj.shape = vec![2, 3];
    let err = Reference::new(&config, &weights, 4)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.layers.0.self_attn.k_proj.weight"),
        "{err}"
    );
}
