/**
 * The FFN activations, in one table: the names GGUF metadata gives them, the number the kernels
 * know each by (assembly/model_ops.ts ACT_*; a test reads the module's exported constants and
 * checks them against this table), whether the activation has exact zeros (what makes a neuron
 * skippable without a threshold), and its scalar form for the plain-TS references.
 */

export type Activation = "silu" | "relu" | "drelu" | "gelu" | "swiglu_oai";

interface ActivationTraits {
  /** the kernels' code (ffn_act, the sparse bundle kernels) */
  readonly code: number;
  /** what `<arch>.feed_forward_activation` may say for it (lower case) */
  readonly names: readonly string[];
  /**
   * ReLU family: act(g) is exactly 0 for g <= 0, so a neuron whose gate is not positive computes
   * nothing. SiLU and GELU have no exact zeros: only a threshold on |act(g)| makes them sparse.
   */
  readonly exactZeros: boolean;
}

export const ACTIVATIONS: Readonly<Record<Activation, ActivationTraits>> = {
  silu: { code: 0, names: ["silu", "swiglu"], exactZeros: false },
  relu: { code: 1, names: ["relu", "reglu"], exactZeros: true },
  drelu: { code: 2, names: ["drelu"], exactZeros: true },
  gelu: { code: 3, names: ["gelu", "geglu"], exactZeros: false },
  swiglu_oai: { code: 4, names: ["swiglu_oai"], exactZeros: false },
};

/**
 * gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai): the gate capped at SWIGLU_OAI_LIMIT from above,
 * times its sigmoid at SWIGLU_OAI_ALPHA times it, times (up clamped to +-SWIGLU_OAI_LIMIT) + 1.
 * The kernels (assembly/activation_math.ts) hold the same two numbers.
 */
export const SWIGLU_OAI_LIMIT = 7;
export const SWIGLU_OAI_ALPHA = 1.702;

/** The activation a metadata name stands for (any case), or undefined. */
export function activationByName(name: string): Activation | undefined {
  const n = name.toLowerCase();
  for (const [a, t] of Object.entries(ACTIVATIONS) as [Activation, ActivationTraits][])
    if (t.names.includes(n)) return a;
  return undefined;
}

/** Every metadata name an activation may go by, for error messages. */
export const ACTIVATION_NAMES: readonly string[] = Object.values(ACTIVATIONS).flatMap((t) => t.names);

const GELU_C = 0.7978845608028654;

/** act(g) alone (dReLU's gate half: relu(g)), in double precision as the references compute it. */
export function gateActivation(kind: Activation, g: number): number {
  switch (kind) {
    case "silu":
      return g / (1 + Math.exp(-g));
    case "relu":
    case "drelu":
      return g > 0 ? g : 0;
    case "gelu":
      // the tanh approximation, in ggml's (and the kernels') order of operations
      return 0.5 * g * (1 + Math.tanh(GELU_C * g * (1 + 0.044715 * g * g)));
    case "swiglu_oai": {
      const x = Math.min(g, SWIGLU_OAI_LIMIT);
      return x / (1 + Math.exp(-SWIGLU_OAI_ALPHA * x));
    }
  }
}

/** The gated activation act(g) * u (dReLU: relu(g) * relu(u)). */
export function gatedActivation(kind: Activation, g: number, u: number): number {
  if (kind === "drelu") return g > 0 && u > 0 ? g * u : 0;
  if (kind === "relu") return g > 0 ? g * u : 0;
  if (kind === "swiglu_oai")
    return gateActivation(kind, g) * (Math.min(SWIGLU_OAI_LIMIT, Math.max(-SWIGLU_OAI_LIMIT, u)) + 1);
  return gateActivation(kind, g) * u;
}
