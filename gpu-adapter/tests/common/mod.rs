//! The dense matrices the device tests factorize, and the host factorization they are
//! checked against (shared by `runtime.rs` and `fake.rs`).

/// A symmetric positive definite `n × n` matrix, column-major.
pub(crate) fn spd(n: usize) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..n {
            a[i + j * n] = 1.0 / (1.0 + i.abs_diff(j) as f64) + if i == j { n as f64 } else { 0.0 };
        }
    }
    a
}

/// Tile (m, k) of the `n × n` matrix `a`, `nb × nb`.
pub(crate) fn tile(a: &[f64], n: usize, nb: usize, m: usize, k: usize) -> Vec<f64> {
    let mut t = vec![0.0; nb * nb];
    for j in 0..nb {
        for i in 0..nb {
            t[i + j * nb] = a[(m * nb + i) + (k * nb + j) * n];
        }
    }
    t
}

/// Unblocked Cholesky on the host (lower), for the check.
pub(crate) fn cholesky_cpu(a: &[f64], n: usize) -> Vec<f64> {
    let mut l = vec![0.0; n * n];
    for j in 0..n {
        let d = a[j + j * n] - (0..j).map(|k| l[j + k * n] * l[j + k * n]).sum::<f64>();
        l[j + j * n] = d.sqrt();
        for i in j + 1..n {
            let s = a[i + j * n] - (0..j).map(|k| l[i + k * n] * l[j + k * n]).sum::<f64>();
            l[i + j * n] = s / l[j + j * n];
        }
    }
    l
}
