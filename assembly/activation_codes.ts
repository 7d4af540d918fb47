// The FFN activations' codes, as every kernel taking an activation reads them. The TypeScript
// side's table (src/format/activations.ts) must give the same numbers: test/activations.test.ts
// reads the exported constants from the built module and compares.

export const ACT_SILU: i32 = 0;
export const ACT_RELU: i32 = 1;
export const ACT_DRELU: i32 = 2;
export const ACT_GELU: i32 = 3;
export const ACT_SWIGLU_OAI: i32 = 4;

// Not an activation: added to the sparse bundle kernels' act argument when each bundle carries
// its neuron's gate and up biases (two f32 after its parts; gpt-oss's experts), which the kernels
// then add to the gate and up dots.
export const SPARSE_BIASED: i32 = 256;
