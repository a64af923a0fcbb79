"""Orders, hidden degrees and masks (pure NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

from tfp_maf import masks


def _reach(mask_list):
    total = mask_list[0]
    for m in mask_list[1:]:
        total = total @ m
    return total > 0  # [D_in, D_out]: does input j reach output i?


@pytest.mark.parametrize("order", ["left-to-right", "right-to-left", "random", [2, 0, 3, 1, 4]])
@pytest.mark.parametrize("method", ["sequential", "random"])
@pytest.mark.parametrize("hidden", [[], [7], [9, 4], [12, 12, 12]])
def test_mask_product_is_strictly_triangular_in_the_order(order, method, hidden):
    D = 5
    perm = masks.order_permutation(D, order, seed=3)
    deg_in = masks.input_degrees(D, order, seed=3)
    degrees, prev = [], deg_in
    for i, h in enumerate(hidden):
        prev = masks.hidden_degrees(h, D, method, prev, seed=i)
        degrees.append(prev)
    reach = _reach(masks.made_masks(deg_in, degrees))[perm][:, perm]
    # Never from a later (or the same) variable: strictly upper triangular in order.
    assert not np.any(np.tril(reach)), reach
    if method == "sequential" and all(h >= D - 1 for h in hidden):
        # Every degree present: no conditional independence is introduced.
        np.testing.assert_array_equal(reach, np.triu(np.ones((D, D), bool), k=1))


def test_sequential_degrees_cover_every_degree():
    d = masks.hidden_degrees(10, 6)
    assert set(d) == {1, 2, 3, 4, 5}
    np.testing.assert_array_equal(d[:5], [1, 2, 3, 4, 5])


def test_random_degrees_respect_previous_minimum_and_seed():
    prev = np.array([3, 4, 5])
    d = masks.hidden_degrees(50, 8, "random", prev, seed=1)
    assert d.min() >= 3 and d.max() <= 7
    np.testing.assert_array_equal(d, masks.hidden_degrees(50, 8, "random", prev, seed=1))


def test_orders():
    np.testing.assert_array_equal(masks.order_permutation(3, "right-to-left"), [2, 1, 0])
    np.testing.assert_array_equal(masks.input_degrees(3, [2, 0, 1]), [2, 3, 1])
    a = masks.order_permutation(6, "random", seed=0)
    np.testing.assert_array_equal(a, masks.order_permutation(6, "random", seed=0))
    assert sorted(a) == list(range(6))


@pytest.mark.parametrize("bad", [[0, 1, 1], [0, 1], [1, 2, 3]])
def test_bad_permutation_raises(bad):
    with pytest.raises(ValueError, match=r"permutation of range\(3\)"):
        masks.order_permutation(3, bad)


def test_bad_names_raise():
    with pytest.raises(ValueError, match="order must be one of"):
        masks.order_permutation(3, "sideways")
    with pytest.raises(ValueError, match="'sequential' or 'random'"):
        masks.hidden_degrees(4, 3, "clever")


def test_one_variable_has_no_dependencies():
    deg_in = masks.input_degrees(1)
    m = masks.made_masks(deg_in, [masks.hidden_degrees(4, 1)])
    assert not np.any(_reach(m))
