"""The search's structure without XLA: library routing as placement, the one-move neighbourhood
and its order, the early stop's error rate, the schedule's phases, and the choice of the winner
(the finalists' race, pruning)."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution.flags import (
    LIBRARY_FLAGS,
    FlagError,
    as_flags,
    as_placement,
    checked_config,
    is_default,
    on_top_of,
    parse_assignment,
    routing,
    to_xla,
)
from execution.measure import (
    CATASTROPHE_MIN_SECONDS,
    MeasureSettings,
    Runner,
    catastrophic,
    early_decision,
    measure_pair,
)
from tuner.schedule import LIKELY_RANK, Scheduled, cold_rank, likely, neighbourhood, order_moves
from tuner.search import SAME_PROGRAM
from tuner.space import Param, SearchSpace, config_key, graph_space
from tuner.strategies import FAILED, STRATEGIES, TrialRecord, propose
from tuner.trial import Trial
from tuner.tune import COMPARE_SETTINGS, SEARCH_SETTINGS, VERIFY_SETTINGS
from tuner.winner import finalists, prune, race
from vocabulary.interval import Interval
from vocabulary.tuning import TrialOutcome

YNN, XNN, ONEDNN = (LIBRARY_FLAGS[b] for b in ("ynn", "xnn", "onednn"))
# jaxlib 0.10.2's default routing, plus a type this project's code has never heard of.
DEFAULTS = {YNN: ("INDIVIDUAL_DOT", "INDIVIDUAL_CONVOLUTION", "REDUCE", "NEW_TYPE"), XNN: (),
            ONEDNN: ()}
TYPES = ("DOT", "ELTWISE", "INDIVIDUAL_CONVOLUTION", "INDIVIDUAL_DOT", "REDUCE", "NEW_TYPE")
BACKENDS = ("xla", "ynn", "xnn", "onednn")

placements = st.dictionaries(st.sampled_from([f"placement:{t}" for t in TYPES]),
                             st.sampled_from(BACKENDS))


@given(placements)
def test_placement_round_trips_through_the_three_lists_and_no_type_sits_in_two(config):
    moves = {k: v for k, v in config.items() if not is_default(k, v, DEFAULTS)}
    flags = as_flags(config, DEFAULTS)
    assert set(flags) <= set(LIBRARY_FLAGS.values())  # only the list flags reach XLA
    lists = routing(config, DEFAULTS)
    for fusion_type in TYPES:
        holders = [flag for flag, members in lists.items() if fusion_type in members]
        assert len(holders) <= 1, (fusion_type, lists)
        backend = config.get(f"placement:{fusion_type}")
        if backend is not None:  # a moved type is where the move put it
            assert holders == ([] if backend == "xla" else [LIBRARY_FLAGS[backend]])
        else:  # every other type, unknown ones included, stays where the compiler put it
            assert holders == [f for f, m in DEFAULTS.items() if fusion_type in m]
    assert as_placement(flags, DEFAULTS) == moves


FAST_MATH = "xla_cpu_enable_fast_math"
configs = st.builds(lambda placed, fast: {**placed, **({} if fast is None else {FAST_MATH: fast})},
                    placements, st.sampled_from([None, True, False]))


@given(configs, configs)
def test_a_config_written_as_a_change_to_another_compiles_as_itself(config, baseline):
    # How a comparison of two configs is evaluated: one compiled on top of the other.
    defaults = {**DEFAULTS, FAST_MATH: False}
    merged = {**baseline, **on_top_of(config, baseline, defaults)}
    assert routing(merged, defaults) == routing(config, defaults)
    assert merged.get(FAST_MATH, False) == config.get(FAST_MATH, False)


def test_a_change_that_cannot_be_written_back_is_none():
    assert on_top_of({}, {"xla_unknown_flag": 1}, DEFAULTS) is None  # no default to go back to
    both = {**DEFAULTS, XNN: ("REDUCE",)}  # REDUCE in two lists: no placement says so
    assert on_top_of({}, {"placement:REDUCE": "xla"}, both) is None
    assert on_top_of({}, {"placement:DOT": "xnn"}, both) == {"placement:DOT": "xla"}


def test_placement_reaches_xla_as_list_overrides():
    settings = to_xla({"placement:REDUCE": "xla", "placement:ELTWISE": "xnn"}, DEFAULTS)
    assert settings.overrides == {
        XNN: "LIBRARY_FUSION_TYPE_ELTWISE",
        YNN: "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,"
             "LIBRARY_FUSION_TYPE_NEW_TYPE"}
    # Everything to XLA's own emitters empties the list: XLA's way to say "none".
    assert to_xla({f"placement:{t}": "xla" for t in DEFAULTS[YNN]}, DEFAULTS).overrides == {YNN: ""}
    # Moves apply on top of a list a config (say an old store entry) sets itself.
    assert routing({YNN: ("REDUCE",), "placement:REDUCE": "onednn"}, DEFAULTS) == {
        YNN: (), XNN: (), ONEDNN: ("REDUCE",)}


def test_a_type_routed_to_two_libraries_has_no_placement_and_keeps_its_lists():
    both = {YNN: ("REDUCE",), XNN: ("REDUCE",)}
    assert as_placement(both, DEFAULTS) == both


def test_placements_are_checked_where_configs_enter():
    assert parse_assignment("placement:REDUCE=XLA") == ("placement:REDUCE", "xla")
    assert checked_config({"placement:REDUCE": "onednn"}) == {"placement:REDUCE": "onednn"}
    for bad in ({"placement:REDUCE": "gpu"}, {"placement:reduce;rm": "xla"},
                {"placement:REDUCE": ["xla"]}, {"placement:": "xla"}):
        with pytest.raises(FlagError):
            checked_config(bad)


def test_the_neighbourhood_is_every_single_move_and_a_cold_start_tries_routing_first():
    space = graph_space("cpu", None, DEFAULTS, fusion_types=TYPES)
    moves = neighbourhood(space)
    assert len(moves) == sum(len(p.values) for p in space.params) == len(set(moves))
    ordered = order_moves(moves)
    # First every fusion type the compiler gives a library taken back to XLA's own emitters.
    to_xla = [m for m in ordered if m[0].startswith("placement:") and m[1] == "xla"]
    assert ordered[:len(to_xla)] == to_xla
    assert {m[0] for m in to_xla} == {f"placement:{t}" for t in DEFAULTS[YNN]}
    # Then the types YNNPACK takes, before the flags of the same rank (the scheduler's).
    to_ynn = [m for m in ordered if m[0].startswith("placement:") and m[1] == "ynn"]
    assert ordered[len(to_xla):len(to_xla) + len(to_ynn)] == to_ynn
    assert ordered[len(to_xla) + len(to_ynn)][0] == "xla_cpu_scheduler_type"
    placements = [m for m in ordered if m[0].startswith("placement:")]
    backends = [m[1] for m in placements]
    assert backends == sorted(backends, key=["xla", "ynn", "xnn", "onednn"].index)
    # Known-bad flags (optimization level 0, optimize for size) come last among the flags.
    assert cold_rank(("xla_backend_optimization_level", 0)) > cold_rank(("xla_cpu_scheduler_type",
                                                                          "MEMORY_OPTIMIZED"))


def test_a_prior_puts_what_won_elsewhere_first_and_what_lost_last():
    space = graph_space("cpu", None, DEFAULTS, fusion_types=TYPES)
    moves = neighbourhood(space)
    scheduler = ("xla_cpu_scheduler_type", "MEMORY_OPTIMIZED")
    reduce_to_xla = ("placement:REDUCE", "xla")
    ordered = order_moves(moves, {scheduler: 0.2, reduce_to_xla: -0.5})
    assert ordered[0] == scheduler and ordered[-1] == reduce_to_xla


def _first_decision(log_ratios: np.ndarray, settings: MeasureSettings) -> tuple[str | None, int]:
    for n in range(1, len(log_ratios) + 1):
        decided = early_decision(log_ratios[:n], settings)
        if decided:
            return decided, n
    return None, len(log_ratios)


@pytest.mark.parametrize("noise", ["normal", "heavy tails", "skewed"])
def test_the_early_stop_keeps_its_stated_error_rate_on_a_candidate_equal_to_the_default(noise):
    settings = MeasureSettings(early_looks=(10, 15, 20, 30), early_alpha=0.01)
    rng = np.random.default_rng(7)
    draw = {"normal": lambda: rng.normal(0, 0.05, 30),
            "heavy tails": lambda: rng.standard_t(2, 30) * 0.05,
            "skewed": lambda: (rng.lognormal(0, 1, 30) - 1.0) * 0.05}[noise]  # median 0
    runs = 3000
    decisions = [_first_decision(draw(), settings)[0] for _ in range(runs)]
    faster = decisions.count("decided faster") / runs
    slower = decisions.count("decided slower") / runs
    # Each side at most early_alpha / 2 (0.005); three standard errors of slack for sampling.
    bound = settings.early_alpha / 2 + 3 * math.sqrt(0.005 * 0.995 / runs)
    assert faster <= bound and slower <= bound, (faster, slower)


@pytest.mark.parametrize("noise", ["normal", "heavy tails", "skewed"])
def test_the_stop_below_the_incumbent_keeps_its_stated_error_rate(noise):
    # A candidate whose true median ratio is the incumbent's lower end (1.3x) is stopped below
    # it at most early_alpha / 2 of the time, over all looks.
    settings = MeasureSettings(early_looks=(10, 15, 20, 30), early_alpha=0.01, stop_below=1.3)
    rng = np.random.default_rng(11)
    draw = {"normal": lambda: rng.normal(0, 0.05, 30),
            "heavy tails": lambda: rng.standard_t(2, 30) * 0.05,
            "skewed": lambda: (rng.lognormal(0, 1, 30) - 1.0) * 0.05}[noise]
    runs = 3000
    decisions = [_first_decision(math.log(1.3) + draw(), settings)[0] for _ in range(runs)]
    below = decisions.count("below the incumbent") / runs
    bound = settings.early_alpha / 2 + 3 * math.sqrt(0.005 * 0.995 / runs)
    assert below <= bound and "decided slower" not in decisions, below


def test_a_candidate_clearly_below_the_incumbent_stops_at_the_first_look():
    settings = MeasureSettings(early_looks=(10, 15, 20, 30), stop_below=1.5)
    rng = np.random.default_rng(2)
    # Faster than the default, but no match for a 1.5x incumbent: it stops, as below it.
    assert _first_decision(math.log(1.1) + rng.normal(0, 0.03, 30), settings) == (
        "below the incumbent", 10)
    # One as fast as the incumbent is decided faster than the default, as without one.
    assert _first_decision(math.log(1.5) + rng.normal(0, 0.03, 30), settings)[0] == "decided faster"
    plain = MeasureSettings(early_looks=(10, 15, 20, 30))
    assert _first_decision(math.log(1.1) + rng.normal(0, 0.03, 30), plain) == ("decided faster", 10)


def test_a_clear_candidate_stops_at_the_first_look_and_a_close_one_does_not():
    settings = MeasureSettings(early_looks=(10, 15, 20, 30))
    rng = np.random.default_rng(1)
    assert _first_decision(math.log(10.0) + rng.normal(0, 0.05, 30), settings) == ("decided faster", 10)
    assert _first_decision(math.log(0.5) + rng.normal(0, 0.05, 30), settings) == ("decided slower", 10)
    assert _first_decision(math.log(1.005) + rng.normal(0, 0.05, 30), settings)[0] is None



# Noise on single runs, as factors of a run's quiet time (a run is never faster than quiet): each
# draws one factor per run from `rng`.
RUN_NOISE: dict[str, Callable[[np.random.Generator], float]] = {
    "normal": lambda rng: math.exp(abs(rng.normal(0, 0.1))),
    "heavy tails": lambda rng: math.exp(abs(rng.standard_t(2)) * 0.05),
    "skewed": lambda rng: 1.0 + rng.lognormal(0, 1) * 0.05,
    # Independent stalls: one run in twenty is five times its length.
    "stalls": lambda rng: 5.0 if rng.random() < 0.05 else math.exp(abs(rng.normal(0, 0.05))),
}


class _Simulated:
    """A default and a candidate `ratio` times slower, runs of `seconds` each (quiet), with
    `noise` on every run, `stall_at` (a run's index, both programs' runs counted in order) made
    `stall` times longer; it records every run (no time passes)."""

    def __init__(self, seconds: float, ratio: float, noise: str, seed: int,
                 stall_at: int | None = None, stall: float = 1.0) -> None:
        self.rng = np.random.default_rng(seed)
        self.seconds, self.ratio, self.noise = seconds, ratio, RUN_NOISE[noise]
        self.stall_at, self.stall = stall_at, stall
        self.runs: list[tuple[str, float]] = []

    def runner(self, which: str) -> Runner:
        def run(repeats: int) -> float:
            quiet = self.seconds * (self.ratio if which == "candidate" else 1.0)
            elapsed = sum(quiet * self.noise(self.rng) for _ in range(repeats))
            if len(self.runs) == self.stall_at:
                elapsed *= self.stall
            self.runs.append((which, elapsed))
            return elapsed

        return run

    def measure(self, settings: MeasureSettings):
        return measure_pair(self.runner("default"), self.runner("candidate"), settings)

    def candidate_seconds(self) -> float:
        return sum(t for which, t in self.runs if which == "candidate")


# A screen as a search runs it, shortened: the rule is decided at the candidate's second run.
SCREEN = dataclasses.replace(SEARCH_SETTINGS, max_pairs=12)


def test_only_a_search_s_screens_stop_catastrophic_candidates():
    assert SEARCH_SETTINGS.catastrophe_ratio == 3.0
    assert COMPARE_SETTINGS.catastrophe_ratio is None and VERIFY_SETTINGS.catastrophe_ratio is None
    assert MeasureSettings().catastrophe_ratio is None


@pytest.mark.parametrize("noise", sorted(RUN_NOISE))
@pytest.mark.parametrize("seconds", [0.05, 1.0])  # three warm-up pairs, or one
def test_noise_never_stops_a_candidate_as_fast_as_the_default(noise, seconds):
    stopped = [seed for seed in range(400)
               if _Simulated(seconds, 1.0, noise, seed).measure(SCREEN).stop_reason == "catastrophic"]
    if noise != "stalls":
        assert not stopped
        return
    # Independent stalls of one run in twenty: it takes two, on the candidate's two runs and on
    # neither of the default's, at most 0.05 ** 2 of the time (module docstring).
    assert len(stopped) / 400 <= 0.05 ** 2 + 3 * math.sqrt(0.0025 / 400), stopped


@pytest.mark.parametrize("stall", [5.0, 1000.0])
def test_one_stall_of_one_run_never_stops_a_candidate_however_long(stall):
    for seed in range(200):
        for at in range(6):  # the first runs: the rule is decided at the candidate's second
            measured = _Simulated(0.05, 1.0, "normal", seed, stall_at=at, stall=stall).measure(SCREEN)
            assert measured.stop_reason != "catastrophic", (seed, at)


@pytest.mark.parametrize("noise", ["normal", "heavy tails", "skewed"])
@pytest.mark.parametrize("seconds", [0.05, 1.0])
def test_a_far_slower_candidate_stops_at_its_second_run_whatever_the_seed(noise, seconds):
    for seed in range(300):
        measured = _Simulated(seconds, 10.0, noise, seed).measure(SCREEN)
        assert measured.stop_reason == "catastrophic" and measured.candidate_runs == 2, seed
        # Its interval holds every ratio of a default run to a candidate run, wholly below 1/3.
        assert measured.speedup.low <= measured.speedup.estimate <= measured.speedup.high < 1 / 3
        assert not measured.significant and measured.pairs <= 1


def test_a_slow_candidate_the_rule_lets_go_costs_a_bounded_share_of_a_screen():
    # A stall of the default's first run lets a 6x slower candidate of a 1 s module go past the
    # rule; its time budget then stops it long before its tenth pair (66 s of its own runs).
    ratio, seconds = 6.0, 1.0
    simulated = _Simulated(seconds, ratio, "normal", 0, stall_at=0, stall=5.0)
    measured = simulated.measure(SCREEN)
    assert measured.stop_reason == "time budget" and measured.pairs < SCREEN.min_pairs
    assert measured.speedup.high < 1.0
    # Its warm-up run, three times the default's share of a screen (10 of its runs, with their
    # noise) and the run that passed it: 45 s here, where 10 pairs were 66 s and more.
    run, share = ratio * seconds * 1.5, SCREEN.min_pairs * seconds * 1.2
    assert simulated.candidate_seconds() <= run + 3.0 * share + run
    # A candidate three times slower or less is never cut before its min_pairs by it.
    assert _Simulated(seconds, 2.5, "normal", 0).measure(SCREEN).pairs >= SCREEN.min_pairs


def test_without_the_rule_or_on_a_short_program_a_slow_candidate_is_screened_as_before():
    plain = dataclasses.replace(SCREEN, catastrophe_ratio=None)
    slow = _Simulated(1.0, 10.0, "normal", 3).measure(plain)
    assert slow.stop_reason == "decided slower" and slow.pairs == 10 and slow.candidate_runs == 11
    short = _Simulated(CATASTROPHE_MIN_SECONDS / 2, 10.0, "normal", 3).measure(SCREEN)
    assert short.stop_reason == "decided slower" and short.pairs == 10


def test_the_rule_is_decided_at_the_second_run_against_the_slowest_default_run():
    assert catastrophic([0.1, 0.1], [0.31, 0.4], 3.0)
    assert not catastrophic([0.1, 0.11], [0.31, 0.4], 3.0)  # the default's slowest run counts
    assert not catastrophic([0.1, 0.1], [0.29, 0.4], 3.0)  # and the candidate's fastest
    assert not catastrophic([0.1], [0.4], 3.0)  # one run of it is not enough
    assert not catastrophic([0.1, 0.1, 0.1], [0.4, 0.4, 0.4], 3.0)  # decided once, at two
    assert not catastrophic([0.01, 0.01], [0.1, 0.1], 3.0)  # a short program: left out
    assert not catastrophic([0.1, 0.1], [0.4, 0.4], None)

SPACE = SearchSpace((Param("a", (1, 2)), Param("b", (True,)), Param("c", ("X", "Y")),
                     Param("d", (True,))))


def _objective(config: dict) -> TrialRecord:
    """A synthetic graph: a=2 gains 1.5x, c=X 1.2x, d 1.05x (together they multiply), b slows."""
    gain = {("a", 2): 1.5, ("c", "X"): 1.2, ("d", True): 1.05, ("b", True): 0.7}
    speedup = math.prod(gain.get(item, 1.0) for item in config.items())
    return TrialRecord(config, math.log(speedup), math.log(speedup) - 0.02)


def _searched(strategy: Scheduled, objective: Callable[[dict], TrialRecord],
              trials: int) -> list[TrialRecord]:
    """The default (trial zero) and the first `trials` proposals of `strategy`, each scored by
    `objective`."""
    history = [TrialRecord({}, 0.0, 0.0)]
    while len(history) <= trials and (config := propose(strategy, history)) is not None:
        history.append(objective(config))
    return history


def test_the_schedule_tries_neighbours_then_combines_the_significant_ones_then_searches():
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=14, seed=0))
    history = _searched(strategy, _objective, 14)
    configs = [t.config for t in history[1:]]
    singles = [{n: v} for n, v in neighbourhood(SPACE)]
    assert strategy.neighbour_evaluations >= len(singles) == 6  # the budget less its reserve
    assert configs[:6] == singles  # the whole (small) neighbourhood first
    # Greedy: the best single (a=2), plus the next best (c=X), plus d: each kept as it gains.
    assert configs[6:8] == [{"a": 2, "c": "X"}, {"a": 2, "c": "X", "d": True}]
    best = max(history, key=lambda t: t.fitness)
    assert best.config == {"a": 2, "c": "X", "d": True}


def test_a_small_gain_hidden_in_noise_is_tried_on_top_of_the_best():
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=14, seed=0))
    history = [TrialRecord({}, 0.0, 0.0)]
    for name, value in neighbourhood(SPACE):
        record = _objective({name: value})
        if name == "d":  # 1.05x, but its screen's interval reaches below 1
            record = TrialRecord(record.config, record.fitness, -0.01)
        history.append(record)
    history.append(_objective({"a": 2, "c": "X"}))
    assert strategy.sample(history, []) == {"a": 2, "c": "X", "d": True}


def test_small_gains_that_no_screen_calls_significant_are_combined():
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=14, seed=0))
    history = [TrialRecord({}, 0.0, 0.0)]
    small = {("a", 2): 1.025, ("c", "X"): 1.02, ("b", True): 0.98}  # each within the noise
    for name, value in neighbourhood(SPACE):
        gain = math.log(small.get((name, value), 1.0))
        history.append(TrialRecord({name: value}, gain, gain - 0.03))
    assert strategy.sample(history, []) == {"a": 2, "c": "X"}


def _interacting(config: dict) -> TrialRecord:
    """A graph with a big lever (a=2: 2x) that changes what another flag does: c=Y does nothing
    alone and adds 30% on top of a=2; b slows; d compiles to the default's program."""
    if config == {"d": True}:
        return TrialRecord(config, 0.0, 0.0, timed=False)
    speedup = (2.0 if config.get("a") == 2 else 1.0) * (0.7 if "b" in config else 1.0)
    speedup *= 1.3 if config.get("a") == 2 and config.get("c") == "Y" else 1.0
    return TrialRecord(config, math.log(speedup), math.log(speedup) - 0.02)


def test_the_schedule_climbs_around_the_best_with_the_moves_that_changed_the_program():
    history = _searched(Scheduled(STRATEGIES["evolution"](SPACE, budget=30, seed=0)),
                        _interacting, 10)
    configs = [t.config for t in history[1:]]
    assert configs[:6] == [{n: v} for n, v in neighbourhood(SPACE)]
    # Nothing to combine (one significant single), so the best's neighbours: the moves that did
    # least harm alone first, around the new best once c=Y beats it; d (the default's program
    # alone) and the best's own move are never tried on top.
    assert configs[6:10] == [{"a": 2, "c": "X"}, {"a": 2, "c": "Y"}, {"a": 1, "c": "Y"},
                             {"a": 2, "c": "Y", "b": True}]
    assert max(history, key=lambda t: t.fitness).config == {"a": 2, "c": "Y"}


def test_neighbours_whose_program_was_known_cost_the_neighbour_phase_nothing():
    # Budget 5, reserve 2: three timed neighbours; the first two compiled to the default's
    # program (free), so the phase goes on to the fifth neighbour, then combines.
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=5, seed=0), reserve=2)
    moves = [{n: v} for tier in strategy.tiers for n, v in tier]
    history = [TrialRecord({}, 0.0, 0.0)]
    history += [TrialRecord(c, 0.0, 0.0, timed=False) for c in moves[:2]]
    history += [_objective(c) for c in moves[2:4]]
    assert strategy.sample(history, []) == moves[4]
    # Pending neighbours count as timed until their results say otherwise.
    assert strategy.sample(history, [moves[4]]) is None
    history.append(_objective(moves[4]))
    assert strategy.sample(history, []) not in moves  # the phase is over: combine or search


def test_the_cold_start_screen_is_the_likeliest_moves_and_a_prior_only_adds_to_it():
    space = graph_space("cpu", None, DEFAULTS, fusion_types=TYPES)
    moves = neighbourhood(space)
    screen = [m for m in moves if likely(m)]
    assert screen and all(cold_rank(m)[0] <= LIKELY_RANK for m in screen)
    assert ("placement:REDUCE", "xla") in screen and ("xla_cpu_optimize_for_size", True) not in screen
    # What won elsewhere joins it; what lost elsewhere stays where its rank puts it.
    won, lost = ("xla_llvm_dot_tiling_factor", 4), ("placement:REDUCE", "xla")
    assert not likely(won) and likely(won, {won: 0.05}) and likely(lost, {lost: -0.5})
    strategy = Scheduled(STRATEGIES["evolution"](space, budget=200, seed=0), prior={won: 0.05})
    first, rest = strategy.tiers
    assert first[0] == won and set(first) | set(rest) == set(moves) and not set(first) & set(rest)


def _tiered(config: dict) -> TrialRecord:
    """A CPU graph whose big lever is in the cold-start screen (REDUCE to XLA's emitters: 2x),
    with a hopeful small one there (the scheduler: 1.005x), and one that is not (a dot tiling
    factor of 4: 1.04x, tier two)."""
    gains = {("placement:REDUCE", "xla"): 2.0, ("xla_cpu_scheduler_type", "MEMORY_OPTIMIZED"): 1.005,
             ("xla_llvm_dot_tiling_factor", 4): 1.04}
    speedup = math.prod(gains.get(move, 1.0) for move in config.items())
    return TrialRecord(config, math.log(speedup), math.log(speedup) - 0.01)


def test_the_schedule_combines_and_climbs_its_cold_start_screen_before_the_other_moves():
    space = graph_space("cpu", None, DEFAULTS, fusion_types=TYPES)
    strategy = Scheduled(STRATEGIES["evolution"](space, budget=200, seed=0), prior={})
    first, rest = strategy.tiers
    history = _searched(strategy, _tiered, 2 * len(first) + len(rest) + 4)
    configs = [t.config for t in history[1:]]
    assert configs[:len(first)] == [{n: v} for n, v in first]
    assert not strategy.screened(history[:len(first) + 1])  # a tier tried, its combinations not
    # One significant single, and the move that screened above 1 on top of it: combined; then
    # the cold-start screen is over, and the best's neighbours by the tier's moves come before
    # the second tier (a big lever changes what the others do).
    best = {"placement:REDUCE": "xla", "xla_cpu_scheduler_type": "MEMORY_OPTIMIZED"}
    assert configs[len(first)] == best
    assert strategy.screened(history[:len(first) + 2])
    second = configs.index(dict([rest[0]]))
    climbed = configs[len(first) + 1:second]
    moved = [{k for k in c.keys() | best.keys() if c.get(k) != best.get(k)} for c in climbed]
    assert climbed and all(len(m) == 1 for m in moved)  # each one move from the best
    assert set().union(*moved) <= {name for name, _ in first}
    assert {"xla_llvm_dot_tiling_factor": 4} in configs


def test_the_schedule_waits_for_results_it_needs_and_never_proposes_twice():
    strategy = Scheduled(STRATEGIES["random"](SPACE, budget=20, seed=0))
    history = [TrialRecord({}, 0.0, 0.0)]
    pending = [{n: v} for n, v in neighbourhood(SPACE)]
    assert strategy.sample(history, pending) is None  # combining needs every neighbour measured
    history += [_objective(c) for c in pending]
    combination = strategy.sample(history, [])
    assert combination == {"a": 2, "c": "X"}
    assert strategy.sample(history, [combination]) is None  # the greedy step needs its result


def _trial(index: int, config: dict, speedup: float, program: str, spread: float = 0.03) -> Trial:
    return Trial(index, config, TrialOutcome.MEASURED, program,
                 speedup=Interval(speedup, speedup - spread, speedup + spread), numerics_ok=True)


def _pruned(truth: dict[str, float], screened: float = 1.6) -> tuple[Trial, list[tuple[dict, dict]],
                                                                      list[Trial], list[Trial]]:
    """Screens of a alone (1.5x), c and d alone (no gain) and all three (`screened`), each
    +-3%; `prune` with comparisons that are their programs' ratio in `truth` +-0.4%: the
    winner, the comparisons made (config, baseline), the trials and the recorded ones."""
    trials = [_trial(0, {"a": 2}, 1.5, "A"), _trial(1, {"c": "X"}, 1.01, "C"),
              _trial(2, {"d": True}, 1.0, "D"), _trial(3, {"a": 2, "c": "X", "d": True}, screened, "ACD")]
    programs = {config_key({"a": 2, "c": "X"}): "AC", config_key({"a": 2}): "A",
                config_key({"c": "X", "d": True}): "CD", config_key({"c": "X"}): "C",
                config_key(trials[3].config): "ACD"}
    runs = []

    def compare(index: int, config: dict, baseline: dict) -> Trial:
        runs.append((config, baseline))
        ratio = truth[programs[config_key(config)]] / truth[programs[config_key(baseline)]]
        return Trial(index, config, TrialOutcome.MEASURED, programs[config_key(config)],
                     speedup=Interval(ratio, ratio - 0.004, ratio + 0.004), numerics_ok=True)

    recorded: list[Trial] = []
    best = prune(compare, trials, recorded.append, trials[3])
    # A resumed task reuses the comparisons it journaled.
    again = prune(lambda *args: pytest.fail("compared twice"), trials, recorded.append, trials[3])
    assert again.config == best.config
    return best, runs, trials, recorded


def test_pruning_keeps_only_the_changes_that_matter():
    # The speedup of each program over the default.
    best, runs, trials, recorded = _pruned({"ACD": 1.6, "AC": 1.61, "A": 1.59, "CD": 1.0, "C": 1.0})
    # c and d did nothing alone, but the screens show A wholly below ACD: together they matter,
    # so each is undone in turn. d first (it did least alone): AC is no slower than ACD, so d
    # goes; then c, against AC: A is 1.2% slower (a small change of a small win), so c stays;
    # then a. Each undo is timed against the winner so far, even where a search trial of that
    # config exists: a screen against the default is no comparison between two close programs.
    assert best.config == {"a": 2, "c": "X"}
    ac = {"a": 2, "c": "X"}
    assert runs == [(ac, trials[3].config), ({"a": 2}, ac), ({"c": "X"}, ac)]
    assert all(t.phase == "prune" for t in recorded) and recorded == trials[4:]
    assert [t.baseline for t in recorded] == [trials[3].config, ac, ac]


def test_pruning_undoes_the_changes_that_did_nothing_alone_together_unless_shown_slower():
    # The screens cannot tell A from ACD. c and d do nothing, alone or with a: the config
    # without both is not shown slower (its interval reaches 1), so both go at once, and a,
    # the gain itself, is left.
    best, runs, trials, _ = _pruned({"ACD": 1.6, "AC": 1.6, "A": 1.601, "CD": 1.0, "C": 1.0}, 1.52)
    assert best.config == {"a": 2} and runs == [({"a": 2}, trials[3].config)]
    # Together they are worth 0.6%: A is shown slower, so each is undone in turn, as above.
    best, runs, trials, _ = _pruned({"ACD": 1.6, "AC": 1.61, "A": 1.59, "CD": 1.0, "C": 1.0}, 1.52)
    ac = {"a": 2, "c": "X"}
    assert best.config == ac
    assert runs == [({"a": 2}, trials[3].config), (ac, trials[3].config), ({"a": 2}, ac), ({"c": "X"}, ac)]


def test_pruning_drops_a_change_that_leaves_the_program_as_it_is_without_timing():
    trials = [_trial(0, {"a": 2}, 1.5, "A"), _trial(1, {"b": True}, 1.0, "B"),
              _trial(2, {"a": 2, "b": True}, 1.55, "A")]
    best = prune(lambda index, config, baseline: Trial(index, config, TrialOutcome.IDENTICAL, "A",
                                                       speedup=SAME_PROGRAM, numerics_ok=True),
                 trials, lambda t: None, trials[2])
    assert best.config == {"a": 2}


def test_the_finalists_race_and_the_fastest_against_the_one_ahead_wins():
    trials = [_trial(0, {"a": 2}, 1.30, "A"), _trial(1, {"c": "X"}, 1.26, "C"),
              _trial(2, {"d": True}, 1.10, "D", spread=0.02),  # clearly behind: no finalist
              _trial(3, {"a": 2, "d": True}, 1.28, "AD"), _trial(4, {"b": True}, 1.35, "B", spread=0.08),
              Trial(5, {"a": 1}, TrialOutcome.DUPLICATE, "A", speedup=Interval(1.30, 1.27, 1.33),
                    numerics_ok=True)]
    assert [t.program for t in finalists(trials)] == ["B", "A", "AD"]
    afresh = {"B": 1.21, "A": 1.29, "AD": 1.27}  # B's screen was its luck
    recorded: list[Trial] = []

    def program(config: dict) -> str:
        return next(t.program for t in trials if t.config == config)

    def compare(index: int, config: dict, baseline: dict) -> Trial:
        return _trial(index, config, afresh[program(config)] / afresh[program(baseline)],
                      program(config), spread=0.004)

    winner = race(compare, trials, recorded.append)
    # A against B: faster, so A leads; AD against A: slower.
    assert winner is trials[0]
    assert [(t.phase, t.program, t.baseline) for t in recorded] == [
        ("race", "A", {"b": True}), ("race", "AD", {"a": 2})]
    assert trials[6:] == recorded
    # A resumed task reuses the race it journaled.
    assert race(lambda *args: pytest.fail("raced twice"), trials, recorded.append) is winner
    # A clear winner needs no race; nothing faster than the default, no winner.
    clear = [_trial(0, {"a": 2}, 2.0, "A"), _trial(1, {"c": "X"}, 1.3, "C")]
    assert race(lambda *args: pytest.fail("raced"), clear, recorded.append) is clear[0]
    assert race(compare, [_trial(0, {"a": 2}, 0.9, "A")], recorded.append) is None


def test_a_failed_trial_never_wins_and_the_default_is_trial_zero():
    history = [TrialRecord({}, 0.0, 0.0), TrialRecord({"a": 1}, FAILED)]
    strategy = Scheduled(STRATEGIES["anneal"](SPACE, budget=8, seed=0))
    config = propose(strategy, history)
    assert config is not None and config_key(config) not in {"{}", config_key({"a": 1})}


@settings(max_examples=30)
@given(st.integers(min_value=3, max_value=60), st.integers(min_value=0, max_value=5))
def test_the_neighbour_phase_leaves_a_reserve_for_the_later_phases(budget, seed):
    strategy = Scheduled(STRATEGIES["evolution"](SPACE, budget=budget, seed=seed))
    assert 1 <= strategy.neighbour_evaluations <= max(1, budget - 2)
