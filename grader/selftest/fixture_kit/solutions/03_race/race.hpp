#pragma once
// Counts to n on `threads` threads (each adds n / threads); returns the total.
long count_parallel(long n, int threads);
