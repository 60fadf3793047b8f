"""TrueSkill with many players: skills from the outcomes of two-player games, under EP.

skill[p] ~ N(25, 70) for each player; in game g, each player performs with noise,
pw[g] ~ N(skill[winner[g]], 16), pl[g] ~ N(skill[loser[g]], 16), and the winner performed
better: ``ff.constrain_true(pw > pl)``.  Players and games are plates: ``skill[winner]``
gathers the winners' skills for all games at once, and every EP sweep is a few array
operations over all games (parallel EP: every game's message from one posterior of the
skills per sweep).  The test suite checks the posteriors against an EP written out in
NumPy (``tests/runtime/handwritten.py``) to 1e-10.
"""

from __future__ import annotations

import time

import numpy as np
from scipy import stats

import factorflow as ff

PRIOR_MEAN, PRIOR_VARIANCE, NOISE_VARIANCE = 25.0, 70.0, 16.0


def games(players: int, n_games: int, rng: np.random.Generator
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(true skills, winner, loser) of ``n_games`` random pairings of distinct players."""
    true = rng.normal(PRIOR_MEAN, np.sqrt(PRIOR_VARIANCE), players)
    a = rng.integers(0, players, n_games)
    b = (a + rng.integers(1, players, n_games)) % players  # never a player against itself
    noise = rng.normal(0.0, np.sqrt(NOISE_VARIANCE), (2, n_games))
    a_wins = true[a] + noise[0] > true[b] + noise[1]
    return true, np.where(a_wins, a, b), np.where(a_wins, b, a)


def trueskill(players: int, winner: np.ndarray, loser: np.ndarray) -> ff.Model:
    with ff.Model("trueskill") as model:
        with ff.Plate(ff.Range("player", players)):
            skill = ff.Gaussian("skill", PRIOR_MEAN, variance=PRIOR_VARIANCE)
        with ff.Plate(ff.Range("game", winner.size)):
            pw = ff.Gaussian("pw", skill[winner], variance=NOISE_VARIANCE)
            pl = ff.Gaussian("pl", skill[loser], variance=NOISE_VARIANCE)
            ff.constrain_true(pw > pl)
    return model


def main(players: int = 500, n_games: int = 10_000, sweeps: int = 50,
         seed: int = 0) -> dict[str, object]:
    rng = np.random.default_rng(seed)
    true, winner, loser = games(players, n_games, rng)
    compiled = trueskill(players, winner, loser).compile("ep")
    start = time.perf_counter()
    result = compiled.run(iterations=sweeps, tolerance=None, progress=False)
    ms = 1e3 * (time.perf_counter() - start) / sweeps
    skill = result["skill"]
    rho = stats.spearmanr(skill.mean, true).statistic
    conservative = skill.mean - 3 * np.sqrt(skill.variance)  # TrueSkill's leaderboard
    top = np.argsort(-conservative)[:5]
    print(f"TrueSkill, {players} players, {winner.size} games: {sweeps} EP sweeps, "
          f"{ms:.1f} ms each")
    print(f"  rank correlation of the posterior means with the true skills: {rho:.3f}")
    print(f"  posterior sd: median {np.median(np.sqrt(skill.variance)):.2f} "
          f"(prior {np.sqrt(PRIOR_VARIANCE):.2f})")
    print("  leaderboard (mean − 3 sd):")
    for p in top:
        print(f"    player {p:4d}: {skill.mean[p]:6.2f} ± {np.sqrt(skill.variance[p]):.2f} "
              f"(true {true[p]:.2f})")
    return {"result": result, "players": players, "winner": winner, "loser": loser,
            "true": true, "rank_correlation": float(rho), "sweeps": sweeps}


if __name__ == "__main__":
    main()
