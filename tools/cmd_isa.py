"""Placeholder: `mxidx isa` is being written."""
import click


@click.command()
def isa():
    """Not available yet."""
    raise click.ClickException("mxidx isa is not available yet")
