"""Physics worlds for `lamp sim --world` and `lamp eval --world`: a published robot model in
MuJoCo, a task that can fail, and a scripted expert that solves it from privileged state.

world.py reads a world file (config/worlds/<name>.yaml), mujoco_model.py builds its MuJoCo model
from the installed package that publishes the arm, physics.py steps and renders it,
pick_place.py is the task and expert.py its scripted solution.
"""
