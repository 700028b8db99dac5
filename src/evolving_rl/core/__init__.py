"""Pure core of Evolving-RL: stdlib only, no I/O, tested on CPU.

Modules:
  skill    skill formats (reference, compact): parsing, validation, Markdown card; its
           parts are skill_reference, skill_compact, skill_search and skill_fields
  audit    rule-based language audit of skill text
  rewards  extractor reward from downstream outcomes, solver outcome reward
  roles    the solver/extractor roles and their advantage weights
  grpo     GRPO advantages over explicit group ids
  grid     N x K x R downstream grid arithmetic and group ids
  nucleus  top-p nucleus of sampled tokens in slime's flat (ids, offsets) form
  actions  `<action>` tag, ALFWorld command and Mind2Web action parsing
  strenum  str-valued Enum used by every status/reason type
"""

from evolving_rl.core.actions import (
    ActionParse,
    ActionStatus,
    WebAction,
    WebActionParse,
    WebOp,
    extract_action,
    parse_alfworld_action,
    parse_web_action,
)
from evolving_rl.core.audit import AuditConfig, AuditResult, AuditRule, audit_text
from evolving_rl.core.grid import Cell, Grid, extractor_group_id, solver_group_id
from evolving_rl.core.grpo import GroupAdvantages, GroupStats, group_advantages
from evolving_rl.core.rewards import (
    ExtractorOutcome,
    ExtractorReward,
    ExtractorRewardStatus,
    RewardConfig,
    extractor_reward,
    fraction_correct,
    solver_reward,
)
from evolving_rl.core.roles import Role, RoleWeights, apply_role_weights
from evolving_rl.core.skill import (
    ParseReason,
    ReferenceSkill,
    Skill,
    SkillFormat,
    SkillParseResult,
    parse_skill,
    render_skill_card,
    skill_schema_text,
    validate_skill,
)

__all__ = [
    "ActionParse",
    "ActionStatus",
    "AuditConfig",
    "AuditResult",
    "AuditRule",
    "Cell",
    "ExtractorOutcome",
    "ExtractorReward",
    "ExtractorRewardStatus",
    "Grid",
    "GroupAdvantages",
    "GroupStats",
    "ParseReason",
    "ReferenceSkill",
    "RewardConfig",
    "Role",
    "RoleWeights",
    "Skill",
    "SkillFormat",
    "SkillParseResult",
    "WebAction",
    "WebActionParse",
    "WebOp",
    "apply_role_weights",
    "audit_text",
    "extract_action",
    "extractor_group_id",
    "extractor_reward",
    "fraction_correct",
    "group_advantages",
    "parse_alfworld_action",
    "parse_skill",
    "parse_web_action",
    "render_skill_card",
    "skill_schema_text",
    "solver_group_id",
    "solver_reward",
    "validate_skill",
]
