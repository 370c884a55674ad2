"""act_small: an ACT-style policy (Zhao et al., 2023) in small, beside pi0.5 as the second
reference a user's own policy can follow: a CNN per camera and a standard torch.nn.Transformer
encoder-decoder turn camera frames and the joint state into a chunk of joint targets. No
language, mean/std normalisation, cameras named `front` and `side`. Built only from
lamp_ros.api; its entry is pipeline.py's `pipeline_from_spec`."""
