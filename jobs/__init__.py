"""The job domain shared by the service, the worker and the client.

`jobs.spec` and `jobs.states` never import torch; `jobs.runtime` and the recipe programs
under `jobs.recipes` run inside the ranks and do.
"""
