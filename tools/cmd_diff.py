"""Placeholder: `mxidx diff` is being written."""
import click


@click.command()
def diff():
    """Not available yet."""
    raise click.ClickException("mxidx diff is not available yet")
