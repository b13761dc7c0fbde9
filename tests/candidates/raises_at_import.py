import torch

raise ValueError("this candidate refuses to load")
