// The FFN activation split for the sparse kernels: the gate's factor, whose zeros let a neuron's
// up and down rows go unread, and the combination with the up dot.

import { gelu, silu, swigluOaiGate, swigluOaiUp } from "./activation_math";
import { ACT_DRELU, ACT_GELU, ACT_SILU, ACT_SWIGLU_OAI } from "./activation_codes";

// The gate's factor a(g): h = a(g) * u (dReLU: a(g) * relu(u); swiglu_oai: a(g) * (clamp(u) + 1)). h is 0 for every u exactly
// when this is 0, so up and down need not be read.
@inline function gateFactor(kind: i32, g: f32): f32 {
  if (kind == ACT_SILU) return silu(g);
  if (kind == ACT_GELU) return gelu(g);
  if (kind == ACT_SWIGLU_OAI) return swigluOaiGate(g);
  return g > 0 ? g : 0;
}

// h = act(g, u) from a = gateFactor(kind, g): the same products ffn_act computes
@inline function combine(kind: i32, a: f32, u: f32): f32 {
  if (kind == ACT_DRELU) return u > 0 ? a * u : 0;
  if (kind == ACT_SWIGLU_OAI) return a * swigluOaiUp(u);
  return a * u;
}

export { gateFactor, combine };
