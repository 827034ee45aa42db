"""A plain DDP script that prints its loss as text, as most scripts do:
torchdeck reads these lines as each rank's curve (nothing to import).

    torchrun --nproc-per-node 2 train_text.py --epochs 3
    torchdeck train examples/ddp/train_text.py -- --epochs 3
"""

from toy import accuracy, batches, finish, prepare, train_step


def main() -> None:
    args, rank, net, opt, x, y = prepare()
    per_epoch = len(x) // args.batch_size
    total = per_epoch * args.epochs
    step = 0
    for epoch in range(1, args.epochs + 1):
        for batch in batches(len(x), epoch, args.batch_size):
            loss, speed = train_step(net, opt, x[batch], y[batch])
            step += 1
            print(f"epoch {epoch}/{args.epochs} step {step}/{total} loss: {loss:.4f} {speed:.0f} samples/s")
        acc = accuracy(net, x, y)
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs} accuracy: {acc * 100:.2f}%")
    finish()


if __name__ == "__main__":
    main()
