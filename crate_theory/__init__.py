"""crate_theory: a float64 NumPy/SciPy reference of the mathematics of CRATE (column convention, Z is d×n).

Imports no torch. Every public function cites its equation in the long paper
(``../shared/seeds/004_eed128db2d338623.txt``, arXiv 2311.13110).
"""
