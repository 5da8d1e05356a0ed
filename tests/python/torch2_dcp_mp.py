"""trainrt.dcp, PyTorch DCP's storage in trainrt's format: an FSDP2 model + AdamW saved at 4 ranks
(dcp.save, then dcp.async_save), loaded at 2 and 3 ranks equal to the saved global state; a
flipped bit, a missing shard and an uncommitted step each detected and fallen back from; the
steps read by trainrt-ckpt verify; a committed step never rewritten.

Usage: torch2_dcp_mp.py MPIRUN TRAINRT_CKPT        (the driver; CTest runs this)
       torch2_dcp_mp.py rank PHASE DIR [ARGS]        (one rank of a phase, under mpirun)"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _mp_driver as drv  # noqa: E402


def rank_main(phase, d, *args):
    import warnings

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    import torch2_fsdp as F
    import trainrt.dcp

    warnings.filterwarnings("ignore")
    drv.init_gloo()
    rank = dist.get_rank()
    model = F.make_model()
    opt = F.make_optimizer(model)
    if phase == "save":
        F.train(model, opt, 2, seed=1)
        dcp.save(F.state(model, opt), storage_writer=trainrt.dcp.Writer(d))                    # step 0
        ref0 = F.full(F.state(model, opt))
        F.train(model, opt, 1, seed=2)
        fut = dcp.async_save(F.state(model, opt), storage_writer=trainrt.dcp.Writer(d))          # step 1
        fut.result()
        ref1 = F.full(F.state(model, opt))
        if rank == 0:
            torch.save({0: ref0, 1: ref1}, os.path.join(d, "..", "ref.pt"))
        # A committed step is never rewritten: saving step 1 again is refused on every rank.
        try:
            dcp.save(F.state(model, opt), storage_writer=trainrt.dcp.Writer(d, step=1))
            print(f"rank {rank} RESAVED")
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            print(f"rank {rank} REFUSED {'already committed' in str(e)}")
        # The refused save leaves gloo work that torch's worker threads release later; wait for it
        # here: released during the interpreter's exit, it aborts the rank (torch takes the GIL in
        # a thread that Py_Finalize then ends: "terminate called without an active exception").
        dist.barrier()
        print(f"rank {rank} SAVED", flush=True)
    elif phase == "load":
        want = int(args[0])
        F.train(model, opt, 1, seed=9)  # state that must be overwritten, optimizer state created
        sd = F.state(model, opt)
        reader = trainrt.dcp.Reader(d, verbose=True)
        dcp.load(sd, storage_reader=reader)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        got = F.full(F.state(model, opt))
        ref = torch.load(os.path.join(d, "..", "ref.pt"), weights_only=False)[want]
        diff = F.differences(got, ref)
        print(f"rank {rank} LOADED {reader.step} {'EQUAL' if not diff else 'DIFFERENT ' + '; '.join(diff[:5])}",
              flush=True)
        F.train(model, opt, 1, seed=3)  # the loaded model trains on
    dist.destroy_process_group()


def main(mpirun, tool):
    drv.require_torch2()
    t = drv.Driver(os.path.abspath(__file__), mpirun)
    ckpt = os.path.join(t.dir, "ckpt")
    out = t.run(4, "save", ckpt)
    t.expect("save at 4 ranks (dcp.save, then dcp.async_save)", out, r"rank \d SAVED", count=4)
    t.expect("a committed step is not saved again", out, r"rank \d REFUSED True", count=4)
    v = subprocess.run([tool, "verify", ckpt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t.expect("trainrt-ckpt verify reads the newest step intact", v.stdout + f"rc={v.returncode}",
             r"OK: step 1 is intact", r"rc=0")
    lst = subprocess.run([tool, "list", ckpt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    t.expect("trainrt-ckpt list shows DCP's shards as global tensors", lst,
             r"tensor model\.0\.weight f32 \[24, 13\] in 4 chunks", r"tensor optim\.state\.2\.weight\.exp_avg f32 \[7, 24\] in 4 chunks")
    for n in (2, 3):
        out = t.run(n, "load", ckpt, 1)
        t.expect(f"load at {n} ranks equals the saved global state", out, r"rank \d LOADED 1 EQUAL", count=n)

    # A flipped bit in rank 1's shard of step 1: the ranks reading it fail its XXH3, all fall back.
    d = t.copy(ckpt, "flipped")
    entry = drv.flip_bit_in_entry(os.path.join(drv.step_dir(d, 1), "rank_00001.shard"), "model.0.weight")
    out = t.run(3, "load", d, 0)
    t.expect(f"a flipped bit in '{entry}' falls back to step 0", out, r"rank \d LOADED 0 EQUAL",
             rf"step 1 .*failed verification.*step 1, rank 1: entry '{entry}' in rank_00001\.shard fails its checksum")
    # A missing shard: step 1 is not intact on any rank, step 0 loads.
    d = t.copy(ckpt, "missing")
    os.unlink(os.path.join(drv.step_dir(d, 1), "rank_00002.shard"))
    out = t.run(2, "load", d, 0)
    t.expect("a missing shard skips step 1", out, r"rank \d LOADED 0 EQUAL", r"skipping step 1 .*rank_00002\.shard")
    # An uncommitted step (no manifest: a save that died before its commit) is never read.
    d = t.copy(ckpt, "uncommitted")
    os.unlink(os.path.join(drv.step_dir(d, 1), "MANIFEST.json"))
    out = t.run(3, "load", d, 0)
    t.expect("an uncommitted step is not loaded", out, r"rank \d LOADED 0 EQUAL", count=3)
    t.finish()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "rank":
        rank_main(*sys.argv[2:])
    else:
        main(*sys.argv[1:3])
