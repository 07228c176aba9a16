"""Moved to :mod:`orbitscope.models.loading`; this name is kept so existing imports keep working."""

from .models.loading import StateDictMismatchError, save_model, load_model, read_metadata, load_state_dict_file, load_user_model, describe_model  # noqa: F401

__all__ = ['StateDictMismatchError', 'save_model', 'load_model', 'read_metadata', 'load_state_dict_file', 'load_user_model', 'describe_model']
