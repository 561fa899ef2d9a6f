# fsx on a file in the fork mount; sourced by run.sh (uses its sf, say, pass,
# fail, $RW, $WORK, $HERE, $FSX_OPS, $FSX_SEED).
#
# fsx checks every read against its model of the file. At the end the model
# itself is written out by fsx: with `-b OPS` fsx simulates operations 1..OPS-1
# without I/O and writes their cumulative effect (its model copy) to a file on
# the native file system, then performs operation OPS for real. That file must
# equal the file in the fork before unmount, after unmount (which commits) and
# remount, and in the committed checkpoint.

say "fsx: $FSX_OPS operations, seed $FSX_SEED, on the fork mount"
mkdir -p "$RW/fsx" "$WORK/fsx-model" "$WORK/fsx-artifacts"
FSX_FILE=$RW/fsx/testfile
MODEL=$WORK/fsx-model/testfile
if fsx -f "$HERE/fsx.toml" -N "$FSX_OPS" -S "$FSX_SEED" -P "$WORK/fsx-artifacts" "$FSX_FILE" \
    >"$WORK/fsx.log" 2>&1 && grep -q 'All operations completed A-OK' "$WORK/fsx.log"; then
    say "fsx: $FSX_OPS operations completed A-OK"
    pass 1
    fsx_ok=1
else
    say "fsx FAILED; the end of its log:"
    tail -40 "$WORK/fsx.log"
    fail 1
    fsx_ok=0
fi

if [ "$fsx_ok" = 1 ]; then
    if fsx -f "$HERE/fsx.toml" -N "$FSX_OPS" -S "$FSX_SEED" -b "$FSX_OPS" "$MODEL" \
        >"$WORK/fsx-model.log" 2>&1; then
        fsx_compare() { # what
            if cmp -s "$1" "$MODEL"; then
                say "fsx: $2 equals fsx's model ($(stat -c %s "$MODEL") bytes)"
                pass 1
            else
                say "fsx: $2 DIFFERS from fsx's model: $(cmp "$1" "$MODEL" 2>&1 | head -1)"
                fail 1
            fi
        }
        fsx_compare "$FSX_FILE" "the file in the mount"
        if sf umount "$RW" && sf mount conform "$RW" -o allow_other; then
            fsx_compare "$FSX_FILE" "after umount (commit) and remount, the file"
        else
            say "fsx: umount/remount failed"
            fail 1
        fi
        sf cat conform fsx/testfile >"$WORK/fsx-committed"
        fsx_compare "$WORK/fsx-committed" "the file in the committed checkpoint"
    else
        say "fsx: writing the model failed:"
        tail -20 "$WORK/fsx-model.log"
        fail 1
    fi
fi
