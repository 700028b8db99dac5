"""Pure core of Evolving-RL: stdlib only, no I/O, tested on CPU.

Modules:
  skill    skill formats (reference, compact): parsing, validation, Markdown card; its
           parts are skill_reference, skill_compact, skill_search and skill_fields
  audit    rule-based language audit of skill text
  rewards  extractor reward from downstream outcomes, solver outcome reward, and
           RewardSettings (every reward and advantage setting)
  roles    the solver/extractor roles and their advantage weights
  grpo     GRPO advantages over explicit group ids
  grid     N x K x R downstream grid arithmetic, group ids and group keys (id + role)
  samples  TrainSample, the record both backends train on, and SampleStatus
  nucleus  top-p nucleus of sampled tokens in slime's flat (ids, offsets) form
  actions  `<action>` tag and ALFWorld command parsing
  strenum  str-valued Enum used by every status/reason type
  stats    Fisher's exact test of two pooled win counts
"""
