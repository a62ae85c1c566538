//! Dequantization of every supported ggml type against blocks built here by hand, with values
//! worked out from the block layout (not by calling a quantizer).

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use decoder::gguf::{DequantError, GgmlType, dequantize};
use half::{bf16, f16};

fn h(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

#[test]
fn f32_f16_bf16_are_read_little_endian() {
    let f32_data: Vec<u8> = [1.5f32, -2.25, 0.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(
        dequantize(GgmlType::F32, &f32_data, 3).unwrap(),
        vec![1.5, -2.25, 0.0]
    );

    // 0x3c00 = 1.0, 0xc000 = -2.0, 0x3555 ~ 0.33325 in binary16.
    let f16_data = [0x00, 0x3c, 0x00, 0xc0, 0x55, 0x35];
    let got = dequantize(GgmlType::F16, &f16_data, 3).unwrap();
    assert_eq!(got[..2], [1.0, -2.0]);
    assert_eq!(got[2], 0.333_251_95);

    // bf16 is the top half of an f32: 0x3fc0 = 1.5, 0xc020 = -2.5.
    let bf16_data = [0xc0, 0x3f, 0x20, 0xc0];
    assert_eq!(
        dequantize(GgmlType::Bf16, &bf16_data, 2).unwrap(),
        vec![1.5, -2.5]
    );
    assert_eq!(bf16::from_f32(1.5).to_le_bytes(), [0xc0, 0x3f]);
}

#[test]
fn q8_0_is_scale_times_signed_byte() {
    // Two blocks: d = 0.5 with qs = -16..16, d = -0.25 with qs all 127 except qs[31] = -128.
    let mut data = Vec::new();
    data.extend_from_slice(&h(0.5));
    data.extend((-16i8..16).map(|q| q as u8));
    data.extend_from_slice(&h(-0.25));
    data.extend(std::iter::repeat_n(127u8, 31));
    data.push(0x80);
    let got = dequantize(GgmlType::Q8_0, &data, 64).unwrap();
    for (j, &v) in got[..32].iter().enumerate() {
        assert_eq!(v, 0.5 * (j as f32 - 16.0), "element {j}");
    }
    assert!(got[32..63].iter().all(|&v| v == -31.75));
    assert_eq!(got[63], 32.0);
}

#[test]
fn q4_0_low_nibbles_first_then_high_offset_by_8() {
    // d = 2; qs[j] = (15 - j) << 4 | j: element j (< 16) is 2 * (j - 8), element 16 + j is
    // 2 * (15 - j - 8).
    let mut data = h(2.0).to_vec();
    data.extend((0u8..16).map(|j| ((15 - j) << 4) | j));
    let got = dequantize(GgmlType::Q4_0, &data, 32).unwrap();
    assert_eq!(got[0], -16.0);
    assert_eq!(got[8], 0.0);
    assert_eq!(got[15], 14.0);
    assert_eq!(got[16], 14.0);
    assert_eq!(got[31], -16.0);
    for j in 0..16 {
        assert_eq!(got[j], 2.0 * (j as f32 - 8.0));
        assert_eq!(got[16 + j], 2.0 * (7.0 - j as f32));
    }
}

#[test]
fn q4_1_is_scale_times_nibble_plus_min() {
    // d = 0.125, m = -1; every byte 0xa3: low nibble 3 -> -0.625, high nibble 10 -> 0.25.
    let mut data = h(0.125).to_vec();
    data.extend_from_slice(&h(-1.0));
    data.extend([0xa3u8; 16]);
    let got = dequantize(GgmlType::Q4_1, &data, 32).unwrap();
    assert!(got[..16].iter().all(|&v| v == -0.625), "{got:?}");
    assert!(got[16..].iter().all(|&v| v == 0.25), "{got:?}");
}

#[test]
fn q5_0_and_q5_1_take_the_fifth_bit_from_qh() {
    // qh bit j set only for j = 0 (element 0) and j = 17 (element 17); nibbles all 1.
    let qh: u32 = 1 | (1 << 17);
    let mut q5_0 = h(1.0).to_vec();
    q5_0.extend_from_slice(&qh.to_le_bytes());
    q5_0.extend([0x11u8; 16]);
    let got = dequantize(GgmlType::Q5_0, &q5_0, 32).unwrap();
    assert_eq!(got[0], 17.0 - 16.0);
    assert_eq!(got[1], 1.0 - 16.0);
    assert_eq!(got[16], 1.0 - 16.0);
    assert_eq!(got[17], 17.0 - 16.0);

    let mut q5_1 = h(0.5).to_vec();
    q5_1.extend_from_slice(&h(3.0));
    q5_1.extend_from_slice(&qh.to_le_bytes());
    q5_1.extend([0x11u8; 16]);
    let got = dequantize(GgmlType::Q5_1, &q5_1, 32).unwrap();
    assert_eq!(got[0], 0.5 * 17.0 + 3.0);
    assert_eq!(got[1], 0.5 + 3.0);
    assert_eq!(got[17], 0.5 * 17.0 + 3.0);
    assert_eq!(got[31], 0.5 + 3.0);
}

#[test]
fn q4_k_uses_6_bit_scales_and_mins_per_32_elements() {
    // Super-block d = 0.5, dmin = 0.25. Sub-block scales (sc, min): sub-blocks 0..4 live in the
    // low 6 bits of scales[0..4] / scales[4..8]; sub-blocks 4..8 take low 4 bits from the
    // nibbles of scales[8..12] and the top 2 bits from bits 6-7 of scales[0..4] / scales[4..8].
    // Chosen: sub-block 0: (1, 2); 1: (3, 0); 2: (63, 63); 3: (0, 1);
    //         4: (17, 33) = low (1, 1) + top (1, 2); 5..8: (2, 0).
    let mut scales = [0u8; 12];
    scales[0] = 1 | (1 << 6); // sc0 = 1, top bits of sc4 = 1
    scales[1] = 3;
    scales[2] = 63;
    scales[3] = 0;
    scales[4] = 2 | (2 << 6); // min0 = 2, top bits of min4 = 2
    scales[5] = 0;
    scales[6] = 63;
    scales[7] = 1;
    scales[8] = 1 | (1 << 4); // sc4 low = 1, min4 low = 1
    scales[9] = 2;
    scales[10] = 2;
    scales[11] = 2;
    // qs: the 32 bytes of chunk c hold sub-block 2c in low nibbles, 2c+1 in high nibbles.
    // Use nibble value 5 for low and 9 for high everywhere, except qs[0] = 0x0f.
    let mut qs = [0x95u8; 128];
    qs[0] = 0x0f;
    let mut data = h(0.5).to_vec();
    data.extend_from_slice(&h(0.25));
    data.extend_from_slice(&scales);
    data.extend_from_slice(&qs);
    assert_eq!(data.len(), 144);
    let got = dequantize(GgmlType::Q4K, &data, 256).unwrap();
    // value = d * sc * q - dmin * min
    assert_eq!(got[0], 0.5 * 1.0 * 15.0 - 0.25 * 2.0); // sub-block 0, q = 15
    assert_eq!(got[1], 0.5 * 1.0 * 5.0 - 0.25 * 2.0);
    assert_eq!(got[32], 0.5 * 3.0 * 0.0 - 0.0); // sub-block 1, high nibble of qs[0] = 0
    assert_eq!(got[33], 0.5 * 3.0 * 9.0);
    assert_eq!(got[64], 0.5 * 63.0 * 5.0 - 0.25 * 63.0); // sub-block 2
    assert_eq!(got[96], 0.5 * 0.0 * 9.0 - 0.25 * 1.0); // sub-block 3
    assert_eq!(got[128], 0.5 * 17.0 * 5.0 - 0.25 * 33.0); // sub-block 4
    assert_eq!(got[160], 0.5 * 2.0 * 9.0); // sub-block 5
    assert_eq!(got[255], 0.5 * 2.0 * 9.0); // sub-block 7
}

#[test]
fn q6_k_combines_low_nibbles_and_high_bit_pairs() {
    // d = 0.5; scales[i] = i + 1 except scales[2] = -3.
    // Element 0: ql[0] low nibble 7, qh[0] bits 0-1 = 2 -> q = 7 + 32 - 32 = 7, scale 1.
    // Element 32: ql[32] low nibble 1, qh[0] bits 2-3 = 0 -> q = 1 - 32 = -31, scale[2] = -3.
    // Element 64: ql[0] high nibble 15, qh[0] bits 4-5 = 3 -> q = 63 - 32 = 31, scale[4] = 5.
    // Element 96: ql[32] high nibble 0, qh[0] bits 6-7 = 1 -> q = 16 - 32 = -16, scale[6] = 7.
    // Element 16: uses scales[1] = 2 (is = 1), ql[16] = 0, qh[16] = 0 -> q = -32.
    // Element 128 (second half): ql[64] low nibble 4, qh[32] bits 0-1 = 1 -> q = 20 - 32 = -12,
    // scale[8] = 9.
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    ql[0] = 0xf7;
    ql[32] = 0x01;
    qh[0] = 2 | (3 << 4) | (1 << 6); // bits 2-3 are 0
    ql[64] = 0x04;
    qh[32] = 1;
    let mut scales: Vec<u8> = (1..=16).map(|s: i8| s as u8).collect();
    scales[2] = (-3i8) as u8;
    let mut data = ql.to_vec();
    data.extend_from_slice(&qh);
    data.extend_from_slice(&scales);
    data.extend_from_slice(&h(0.5));
    assert_eq!(data.len(), 210);
    let got = dequantize(GgmlType::Q6K, &data, 256).unwrap();
    assert_eq!(got[0], 0.5 * 1.0 * 7.0);
    assert_eq!(got[32], 0.5 * -3.0 * -31.0);
    assert_eq!(got[64], 0.5 * 5.0 * 31.0);
    assert_eq!(got[96], 0.5 * 7.0 * -16.0);
    assert_eq!(got[16], 0.5 * 2.0 * -32.0);
    assert_eq!(got[128], 0.5 * 9.0 * -12.0);
}

#[test]
fn q5_k_is_q4_k_with_a_fifth_bit_per_chunk_from_qh() {
    // d = 0.5, dmin = 0.25; every sub-block's (scale, min) = (2, 1): bytes 0..4 scales, 4..8
    // mins, 8..12 the low nibbles of sub-blocks 4..8 (no top bits).
    let mut scales = [0u8; 12];
    scales[..4].fill(2);
    scales[4..8].fill(1);
    scales[8..].fill(2 | (1 << 4));
    // qh[l] bit 2c tops element l of sub-block 2c, bit 2c + 1 element l of sub-block 2c + 1.
    let mut qh = [0u8; 32];
    qh[0] = 0b0000_0001; // element 0 (sub-block 0) + 16
    qh[1] = 0b0000_0010; // element 33 (sub-block 1, l = 1) + 16
    qh[2] = 0b1000_0000; // element 192 + 32 + 2 = 226 (sub-block 7, l = 2) + 16
    let mut qs = [0x73u8; 128]; // low nibble 3, high nibble 7
    qs[96 + 2] = 0xf0; // chunk 3, l = 2: sub-block 6 low 0, sub-block 7 high 15
    let mut data = h(0.5).to_vec();
    data.extend_from_slice(&h(0.25));
    data.extend_from_slice(&scales);
    data.extend_from_slice(&qh);
    data.extend_from_slice(&qs);
    assert_eq!(data.len(), 176);
    let got = dequantize(GgmlType::Q5K, &data, 256).unwrap();
    // value = d * scale * q - dmin * min = q - 0.25
    assert_eq!(got[0], 19.0 - 0.25);
    assert_eq!(got[1], 3.0 - 0.25);
    assert_eq!(got[32], 7.0 - 0.25);
    assert_eq!(got[33], 23.0 - 0.25);
    assert_eq!(got[192 + 2], 0.0 - 0.25);
    assert_eq!(got[226], 31.0 - 0.25);
    assert_eq!(got[255], 7.0 - 0.25);
}

#[test]
fn q3_k_takes_2_bits_a_high_mask_and_signed_6_bit_scales() {
    // Scale k (0..16): low 4 bits from byte k % 8 (low nibble for k < 8, else high), top 2
    // bits from bits 2 (k / 4) of byte 8 + k % 4; minus 32. Chosen: scale 0 = 33 (1 + 2 << 4:
    // byte 0 low nibble 1, byte 8 bits 0-1 = 2) -> 1; scale 9 = 47 (15 + 2 << 4: byte 1 high
    // nibble 15, byte 9 bits 4-5 = 2) -> 15; every other scale 0 -> -32.
    let mut scales = [0u8; 12];
    scales[0] = 1;
    scales[8] = 2;
    scales[1] = 15 << 4;
    scales[9] = 2 << 4;
    // Element 128 n + 32 j + l: bits 2j of qs[32 n + l], minus 4 unless bit 4 n + j of hmask[l].
    let mut hmask = [0u8; 32];
    let mut qs = [0u8; 64];
    qs[0] = 0b11; // element 0: q = 3, hmask bit 0 set -> 3
    hmask[0] = 1;
    qs[1] = 0b01; // element 1: q = 1, no mask bit -> 1 - 4 = -3
    qs[32 + 16] = 0b10 << 2; // element 128 + 32 + 16 = 176 (n 1, j 1, l 16): q = 2
    hmask[16] = 1 << 5; // bit 4 + 1 set -> 2
    let mut data = hmask.to_vec();
    data.extend_from_slice(&qs);
    data.extend_from_slice(&scales);
    data.extend_from_slice(&h(0.5));
    assert_eq!(data.len(), 110);
    let got = dequantize(GgmlType::Q3K, &data, 256).unwrap();
    assert_eq!(got[0], 0.5 * 1.0 * 3.0);
    assert_eq!(got[1], 0.5 * 1.0 * -3.0);
    // Element 176 is sub-block 8 + 2 + 1 = 11: scale -32.
    assert_eq!(got[176], 0.5 * -32.0 * 2.0);
    // Element 16 (n 0, j 0, l 16) is sub-block 1: scale -32, q = 0 - 4.
    assert_eq!(got[16], 0.5 * -32.0 * -4.0);
    // Sub-block 9 (n 1, j 0, l 16..32): scale 15, q = 0 - 4.
    assert_eq!(got[128 + 16], 0.5 * 15.0 * -4.0);
}

#[test]
fn q2_k_takes_2_bits_with_a_4_bit_scale_and_min_per_16() {
    // scales[k]: scale in the low nibble, min in the high one, for sub-block k of 16.
    let mut scales = [0u8; 16];
    scales[0] = 3 | (1 << 4);
    scales[13] = 7 | (2 << 4); // sub-block 13 = n 1, j 2, l 16..32
    let mut qs = [0u8; 64];
    qs[5] = 0b11; // element 5: q = 3
    qs[32 + 20] = 0b10 << 4; // element 128 + 64 + 20 = 212: q = 2
    let mut data = scales.to_vec();
    data.extend_from_slice(&qs);
    data.extend_from_slice(&h(0.5));
    data.extend_from_slice(&h(0.25));
    assert_eq!(data.len(), 84);
    let got = dequantize(GgmlType::Q2K, &data, 256).unwrap();
    assert_eq!(got[5], 0.5 * 3.0 * 3.0 - 0.25 * 1.0);
    assert_eq!(got[6], -0.25);
    assert_eq!(got[212], 0.5 * 7.0 * 2.0 - 0.25 * 2.0);
    assert_eq!(got[255], 0.0);
}

#[test]
fn iq4_nl_and_iq4_xs_index_the_non_linear_levels() {
    // ggml's kvalues_iq4nl.
    let levels = [
        -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
    ];
    // IQ4_NL: Q4_0's layout, the nibble indexing the levels.
    let mut nl = h(0.5).to_vec();
    nl.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let got = dequantize(GgmlType::Iq4Nl, &nl, 32).unwrap();
    for j in 0..16 {
        assert_eq!(got[j], 0.5 * levels[j] as f32, "element {j}");
        assert_eq!(
            got[j + 16],
            0.5 * levels[15 - j] as f32,
            "element {}",
            j + 16
        );
    }
    // IQ4_XS: sub-block k's scale is the nibble k % 2 of scales_l[k / 2] with bits 2k of
    // scales_h on top, minus 32. Sub-block 0: 1 + (2 << 4) = 33 -> 1; sub-block 3: 15 + (1 << 4)
    // = 31 -> -1; the others 0 -> -32.
    let scales_h: u16 = 2 | (1 << 6);
    let scales_l = [0x01u8, 0xf0, 0, 0];
    let mut xs = h(0.25).to_vec();
    xs.extend_from_slice(&scales_h.to_le_bytes());
    xs.extend_from_slice(&scales_l);
    let mut qs = [0x00u8; 128]; // level -127 everywhere
    qs[0] = 0x8f; // sub-block 0: element 0 level 113, element 16 level 1
    qs[48] = 0x09; // sub-block 3, element 96: level 13
    xs.extend_from_slice(&qs);
    assert_eq!(xs.len(), 136);
    let got = dequantize(GgmlType::Iq4Xs, &xs, 256).unwrap();
    assert_eq!(got[0], 0.25 * 1.0 * 113.0);
    assert_eq!(got[16], 0.25 * 1.0 * 1.0);
    assert_eq!(got[1], 0.25 * 1.0 * -127.0);
    assert_eq!(got[96], -0.25 * 13.0); // scale -1
    assert_eq!(got[32], 0.25 * -32.0 * -127.0);
}

#[test]
fn wrong_sizes_and_unsupported_types_are_errors() {
    assert_eq!(
        dequantize(GgmlType::Q8_0, &[0u8; 34], 31),
        Err(DequantError::PartialBlock {
            ggml_type: GgmlType::Q8_0,
            n_elements: 31,
            block: 32
        })
    );
    assert_eq!(
        dequantize(GgmlType::Q4_0, &[0u8; 17], 32),
        Err(DequantError::WrongLength {
            ggml_type: GgmlType::Q4_0,
            n_elements: 32,
            expected: 18,
            got: 17
        })
    );
    let err = dequantize(GgmlType::Q8K, &[0u8; 292], 256).unwrap_err();
    assert!(err.to_string().contains("Q8_K"), "{err}");
    let err = dequantize(GgmlType::from_id(16), &[], 0).unwrap_err();
    assert!(err.to_string().contains("IQ2_XXS"), "{err}");
}
