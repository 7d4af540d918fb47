// Small vector kernels of the forward pass: norms, activations, residual adds.

/** y[i] = x[i] * w[i] / sqrt(mean(x^2) + eps), over n floats. y may equal x. */
export function rmsnorm(y: usize, x: usize, w: usize, n: i32, eps: f32): void {
  let ss: f32 = 0;
  for (let i = 0; i < n; i++) {
    const v = load<f32>(x + (<usize>i << 2));
    ss += v * v;
  }
  const scale: f32 = 1.0 / Mathf.sqrt(ss / <f32>n + eps);
  for (let i = 0; i < n; i++) {
    const o = <usize>i << 2;
    store<f32>(y + o, load<f32>(x + o) * scale * load<f32>(w + o));
  }
}
