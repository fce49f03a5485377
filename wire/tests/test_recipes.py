"""Recipes are data: the rules a recipe, a variant and a `.mallard.toml` must follow."""

from __future__ import annotations

from pathlib import Path

import pytest
from mallard_wire.jobs import AllocatorBuild, SpecAllocator
from mallard_wire.recipes import (
    Options,
    Recipe,
    read_recipe_file,
    show_variant,
    variant_env,
)
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", [ROOT / ".mallard.toml", *sorted((ROOT / "docs" / "recipes")
                                                                  .glob("*.toml"))])
def test_the_shipped_recipes_are_valid(path):
    recipe = read_recipe_file(path.read_text())
    assert recipe is not None and recipe.library


def test_variant_env_per_options_style():
    assert variant_env(Options(prefix="MIMALLOC_"), "arena_eager_commit=1,x=2") == {
        "MIMALLOC_ARENA_EAGER_COMMIT": "1", "MIMALLOC_X": "2"}
    assert variant_env(Options(variable="MALLOC_CONF"), "a=1,b=2") == {"MALLOC_CONF": "a:1,b:2"}
    assert variant_env(Options(variable="SCUDO_OPTIONS", separator="="), "a=1") == {
        "SCUDO_OPTIONS": "a=1"}
    # a stats hook's options come after the variant's own pairs
    assert variant_env(Options(variable="MALLOC_CONF"), "narenas=2", "stats_print=true") == {
        "MALLOC_CONF": "narenas:2,stats_print:true"}
    assert variant_env(None, None) == {} and show_variant(None) == "default"


def test_a_variant_outside_the_allow_list_or_without_options_is_refused():
    with pytest.raises(ValueError, match="unknown option"):
        variant_env(Options(prefix="MALLARD_", keys=["transfer"]), "stats_file=x")
    with pytest.raises(ValueError, match="no runtime options"):
        variant_env(None, "a=1")
    for bad in ("A=1", "a=1;b", "a", "a=1,a=2", "a=$(id)"):
        with pytest.raises(ValueError):
            variant_env(Options(prefix="X_"), bad)


def test_options_take_exactly_one_style():
    with pytest.raises(ValidationError, match="exactly one"):
        Options(prefix="X_", variable="Y")
    with pytest.raises(ValidationError, match="exactly one"):
        Options()


@pytest.mark.parametrize("field,value,message", [
    ("configure", ["-DX=1; rm -rf ~"], "shell syntax"),
    ("configure", ["--prefix=/usr"], "absolute path"),
    ("configure", ["-DX=../../etc"], r"'\.\.'"),
    ("source", "../elsewhere", "relative path"),
    ("source", "/abs", "not absolute"),
    ("library", "../libx.so", "inside the build folder"),
    ("library", "/usr/lib/libc.so.6", "not an absolute path"),
    ("target", "all; id", "pattern"),
])
def test_bad_recipe_fields_are_refused_naming_the_field(field, value, message):
    fields = {"kind": "make", "library": "libx.so", field: value}
    with pytest.raises(ValidationError, match=message) as info:
        Recipe.model_validate(fields)
    assert info.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize("commands,message", [
    ([["sh", "-c", "make"]], "shell string"),
    ([["/usr/bin/make"]], "absolute path"),
    ([["../tool"]], r"'\.\.' segment"),
    ([["make", "a|b"]], "shell syntax"),
])
def test_command_recipes_are_argv_never_a_shell(commands, message):
    with pytest.raises(ValidationError, match=message):
        Recipe(kind="command", commands=commands, library="libx.so")
    with pytest.raises(ValidationError, match="commands are for kind=command"):
        Recipe(kind="make", commands=[["make"]], library="libx.so")


def test_a_recipe_file_is_capped_and_malformed_files_are_errors():
    assert read_recipe_file("[other]\nx = 1\n") is None
    with pytest.raises(ValueError):
        read_recipe_file("[allocator\n")
    with pytest.raises(ValueError, match="larger than"):
        read_recipe_file("#" * 70_000)
    with pytest.raises(ValueError):
        read_recipe_file('[allocator]\nkind = "cmake"\n')  # no library


def test_a_job_side_is_a_build_or_a_catalogue_entry():
    recipe = Recipe(kind="make", library="libx.so", options=Options(prefix="X_", keys=["a"]))
    build = AllocatorBuild(repo_url="/srv/git/x.git", recipe=recipe)
    SpecAllocator(label="head", name="x", commit="main", variant="a=1", build=build)
    with pytest.raises(ValidationError, match="unknown option"):
        SpecAllocator(label="head", name="x", commit="main", variant="b=1", build=build)
    with pytest.raises(ValidationError, match="catalogue"):
        SpecAllocator(label="peer", name="jemalloc", commit="5.3.0")
