"""result.to_xarray (plate names as dimensions, moments as variables) and to_dataframe."""

import numpy as np
import pytest

import factorflow as ff
from tests.conftest import gaussian_mixture


@pytest.fixture(scope="module")
def mixture() -> ff.Result:
    model = gaussian_mixture([-1.0, 0.5, 5.0, 6.0, 4.0], learn_precision=True)
    return model.infer("vmp", init={"means": ff.distributions.Gaussian([0, 5], [1, 1])})


def test_xarray_has_plate_dimensions_and_moments(mixture: ff.Result) -> None:
    ds = mixture.to_xarray()
    assert mixture.dims == {"weights": (), "means": ("k",), "prec": (), "z": ("n",),
                            "x": ("n",)}
    means = mixture["means"]
    assert ds["means_mean"].dims == ("k",)
    np.testing.assert_array_equal(ds["means_mean"].values, means.mean)
    np.testing.assert_array_equal(ds["means_variance"].values, means.variance)
    prec = mixture["prec"]
    assert ds["prec_mean"].dims == ()
    assert float(ds["prec_mean"]) == prec.shape_param / prec.rate
    assert float(ds["prec_variance"]) == prec.shape_param / prec.rate**2
    assert float(ds["prec_shape"]) == prec.shape_param
    assert float(ds["prec_rate"]) == prec.rate
    z = mixture["z"]
    assert ds["z_probs"].dims == ("n", "z_category")
    np.testing.assert_array_equal(ds["z_probs"].values, z.probs)
    np.testing.assert_array_equal(ds["z_mean"].values, z.probs @ np.arange(2))
    assert ds["weights_alpha"].dims == ("weights_category",)
    assert ds["x_value"].dims == ("n",)
    assert ds["means_mean"].attrs == {"posterior": "means", "family": "Gaussian",
                                      "quantity": "mean"}
    assert ds.sizes["k"] == 2 and ds.sizes["n"] == 5


def test_netcdf_keeps_dims_and_readable_variables(mixture: ff.Result, tmp_path) -> None:
    path = tmp_path / "r.nc"
    mixture.to_netcdf(path)
    loaded = ff.load_result(path)
    assert loaded.dims == mixture.dims
    assert loaded.trace == mixture.trace
    import xarray as xr
    ds = xr.load_dataset(path, engine="scipy")
    np.testing.assert_array_equal(ds["means_mean"].values, mixture["means"].mean)
    assert ds["z_probs"].dims == ("n", "z_category")


def test_dataframe_one_row_per_element(mixture: ff.Result) -> None:
    df = mixture.to_dataframe()
    assert list(df.index.names) == ["variable", "element"]
    assert list(df.loc["means"].index) == ["k=0", "k=1"]
    assert "x" not in df.index.get_level_values("variable")
    np.testing.assert_array_equal(df.loc["means", "mean"].to_numpy(), mixture["means"].mean)
    np.testing.assert_array_equal(df.loc["means", "variance"].to_numpy(),
                                  mixture["means"].variance)
    probs = df.loc["z", ["probs[0]", "probs[1]"]].to_numpy()
    np.testing.assert_array_equal(probs, mixture["z"].probs)
    assert df.loc[("prec", ""), "shape"] == mixture["prec"].shape_param
    assert df.loc[("prec", ""), "family"] == "Gamma"
    assert np.isnan(df.loc[("prec", ""), "probs[0]"])
    weights = df.loc[("weights", ""), ["alpha[0]", "alpha[1]"]].to_numpy(dtype=float)
    np.testing.assert_array_equal(weights, mixture["weights"].alpha)
    observed = mixture.to_dataframe(observed=True)
    np.testing.assert_array_equal(observed.loc["x", "value"].to_numpy(),
                                  [-1.0, 0.5, 5.0, 6.0, 4.0])
    assert list(observed.loc["x"].index) == [f"n={i}" for i in range(5)]


def test_two_plates_name_both_axes() -> None:
    with ff.Model("grid") as model:
        i, j = ff.Range("i", 2), ff.Range("j", 3)
        with ff.Plate(i), ff.Plate(j):
            mu = ff.Gaussian("mu", 0.0, variance=1.0)
            ff.Gaussian("y", mu, precision=1.0, observed=np.arange(6.0).reshape(2, 3))
    result = model.infer("ep")
    assert result.to_xarray()["mu_mean"].dims == ("i", "j")
    df = result.to_dataframe()
    assert list(df.loc["mu"].index)[:4] == ["i=0, j=0", "i=0, j=1", "i=0, j=2", "i=1, j=0"]
    # y = mu + noise with mu ~ N(0, 1): posterior mean y / 2, variance 1 / 2
    np.testing.assert_allclose(df.loc["mu", "mean"].to_numpy(), np.arange(6.0) / 2, rtol=1e-9)
    np.testing.assert_allclose(df.loc["mu", "variance"].to_numpy(), 0.5, rtol=1e-9)


def test_empty_plates_give_empty_tables(tmp_path) -> None:
    with ff.Model("empty") as model:
        mean = ff.Gaussian("mean", 0.0, variance=1.0)
        with ff.Plate(ff.Range("n", 0)):
            mu = ff.Gaussian("mu", mean, variance=1.0)
            ff.Gaussian("x", mu, precision=1.0, observed=np.zeros(0))
    result = model.infer("ep")
    df = result.to_dataframe(observed=True)
    assert list(df.index) == [("mean", "")]
    assert (df.loc[("mean", ""), "mean"], df.loc[("mean", ""), "variance"]) == (0.0, 1.0)
    ds = result.to_xarray()
    assert "mu_mean" not in ds and float(ds["mean_variance"]) == 1.0
    result.to_netcdf(tmp_path / "empty.nc")
    assert ff.load_result(tmp_path / "empty.nc")["mu"].batch_shape == (0,)
    assert model.predictive(result, n=3)["x"].shape == (3, 0)
