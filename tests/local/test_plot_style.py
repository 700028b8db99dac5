"""One plot style: zero bars say 0%, unmeasured ones n/a, rate axes span [0, 1], each arm has
one colour in the run plot and the evaluation chart, and the subtitle names the penalties."""

from __future__ import annotations

from matplotlib.colors import to_hex

from evolving_rl.config import load_config
from evolving_rl.domains.registry import domain_for
from evolving_rl.evaluate import report
from evolving_rl.local import plots
from evolving_rl.local.plot_style import colour, plt, reward_subtitle

EVALS = [{"kind": "eval", "step": 0, "phase": "before", "eval/cases": 6,
          "eval/all/without_skill_success_mean": 0.0, "eval/all/with_skill_success_mean": 0.0},
         {"kind": "eval", "step": 3, "phase": "after", "eval/cases": 6,
          "eval/all/without_skill_success_mean": 0.5}]


def _bars(ax) -> dict[str, tuple[set[str], list[str]]]:
    """legend label -> (bar colours, value labels)."""
    texts = [t.get_text() for t in ax.texts]
    out, start = {}, 0
    for container in ax.containers:
        if not hasattr(container, "patches"):
            continue
        colours = {to_hex(p.get_facecolor()) for p in container.patches}
        out[container.get_label()] = (colours, texts[start:start + len(container.patches)])
        start += len(container.patches)
    return out


def test_run_plot_bars_label_zero_and_unmeasured_on_a_rate_axis():
    fig, ax = plt.subplots()
    plots._eval_bars(ax, EVALS)
    bars = _bars(ax)
    assert bars["without skill"] == ({colour("without_skill")}, ["0%", "50%"])
    assert bars["with skill"] == ({colour("with_skill")}, ["0%", "n/a"])
    low, high = ax.get_ylim()
    assert low < 0 < 1 < high < 1.3 and ax.get_title() == "held-out success (6 cases each)"
    plt.close(fig)


def test_evaluation_chart_uses_the_same_arm_colours(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(report, "save", lambda fig, path: seen.update(ax=fig.axes[0]))
    metrics = {"eval/task_type/pick/with_skill_success_mean": 1.0,
               "eval/task_type/pick/without_skill_success_mean": 0.0, "eval/cases": 2}
    report._chart(tmp_path / "x.png", "valid_unseen", {"reference": metrics})
    bars = _bars(seen["ax"])
    assert bars["without skill"] == ({colour("without_skill")}, ["0%"])
    assert bars["with skill"] == ({colour("with_skill")}, ["100%"])


def test_the_subtitle_names_the_penalties_that_make_rewards_negative():
    cfg = load_config("configs/local_cpu.yaml")
    text = reward_subtitle(cfg.rewards, domain_for(cfg).invalid_actions)
    assert "0.2 × share of inadmissible actions" in text and "0.1 for an unparseable skill" in text
    assert reward_subtitle(type(cfg.rewards)(format_penalty=0.0), "x") == (
        "solver reward = success; extractor reward = mean downstream success of its skill")


def test_the_mind2web_subtitle_uses_its_own_words():
    cfg = load_config("configs/local_cpu_web.yaml",
                      overrides=["rewards.invalid_action_penalty=0.5"])
    text = reward_subtitle(cfg.rewards, domain_for(cfg).invalid_actions)
    assert "0.5 × share of unreadable actions" in text and "inadmissible" not in text
