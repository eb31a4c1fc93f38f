package allocator

import (
	"fmt"
	"sort"
)

// freeKey orders cached blocks the way PyTorch's BlockComparatorSize does:
// by stream (as an unsigned pointer value), then size, then address. The
// unmapped-block set uses the same key with size 0, which gives
// BlockComparatorAddress's (stream, address) order.
type freeKey struct {
	stream int64
	size   int64
	addr   uint64
}

func (k freeKey) less(o freeKey) bool {
	if k.stream != o.stream {
		return uint64(k.stream) < uint64(o.stream)
	}
	if k.size != o.size {
		return k.size < o.size
	}
	return k.addr < o.addr
}

type freeItem struct {
	k freeKey
	b *block
}

// btree is an in-memory B-tree of freeItems with unique keys.
//
// The best-fit search needs lower_bound, successor and predecessor queries
// in (stream, size, address) order, plus insertion and deletion, all in
// O(log n): std::set's contract. A B-tree keeps the items of a node
// contiguous, so the common case of a few dozen free blocks per pool is a
// short scan over one or two small arrays. Keys are copied into the tree, so a block's
// fields must not change while it is in a tree (PyTorch has the same rule:
// blocks are erased from their set before they are resized).
type btree struct {
	root *bnode
	n    int
	// spare holds nodes emptied by merges for reuse by splits, so that a
	// tree whose size oscillates produces no garbage.
	spare []*bnode
}

// Node size: small nodes keep the shifting on insert and delete cheap; on
// the mixed benchmark 15 to 31 items per node perform alike.
const (
	btreeMaxItems = 15
	btreeMinItems = btreeMaxItems / 2
)

type bnode struct {
	items    []freeItem
	children []*bnode // nil for a leaf
}

func (n *bnode) leaf() bool { return n.children == nil }

// search returns the index of the first item whose key is not less than k,
// and whether that item's key equals k. Nodes are small, so a linear scan,
// whose branches the CPU predicts well, beats a binary search.
func (n *bnode) search(k freeKey) (int, bool) {
	items := n.items
	i := 0
	for i < len(items) && items[i].k.less(k) {
		i++
	}
	return i, i < len(items) && items[i].k == k
}

func (t *btree) newNode(leaf bool) *bnode {
	var n *bnode
	if k := len(t.spare); k > 0 {
		n = t.spare[k-1]
		t.spare = t.spare[:k-1]
	} else {
		n = &bnode{items: make([]freeItem, 0, btreeMaxItems+1)}
	}
	if !leaf && n.children == nil {
		n.children = make([]*bnode, 0, btreeMaxItems+2)
	} else if leaf {
		n.children = nil
	}
	return n
}

// recycle keeps an emptied node for reuse.
func (t *btree) recycle(n *bnode) {
	clear(n.items[:cap(n.items)])
	n.items = n.items[:0]
	if n.children != nil {
		clear(n.children[:cap(n.children)])
		n.children = n.children[:0]
	}
	t.spare = append(t.spare, n)
}

func (t *btree) len() int { return t.n }

// insert adds an item; the key must not be present already.
func (t *btree) insert(it freeItem) {
	if t.root == nil {
		t.root = t.newNode(true)
	}
	if len(t.root.items) >= btreeMaxItems {
		old := t.root
		t.root = t.newNode(false)
		t.root.children = append(t.root.children, old)
		t.splitChild(t.root, 0)
	}
	t.insertNonFull(t.root, it)
	t.n++
}

// splitChild splits the full child i around its median, which moves up.
func (t *btree) splitChild(n *bnode, i int) {
	c := n.children[i]
	mid := len(c.items) / 2
	right := t.newNode(c.leaf())
	right.items = append(right.items, c.items[mid+1:]...)
	if !c.leaf() {
		right.children = append(right.children, c.children[mid+1:]...)
		clear(c.children[mid+1:])
		c.children = c.children[:mid+1]
	}
	median := c.items[mid]
	clear(c.items[mid:])
	c.items = c.items[:mid]
	n.items = append(n.items, freeItem{})
	copy(n.items[i+1:], n.items[i:])
	n.items[i] = median
	n.children = append(n.children, nil)
	copy(n.children[i+2:], n.children[i+1:])
	n.children[i+1] = right
}

func (t *btree) insertNonFull(n *bnode, it freeItem) {
	for {
		i, found := n.search(it.k)
		if found {
			panic("allocator: duplicate key in free set")
		}
		if n.leaf() {
			n.items = append(n.items, freeItem{})
			copy(n.items[i+1:], n.items[i:])
			n.items[i] = it
			return
		}
		if len(n.children[i].items) >= btreeMaxItems {
			t.splitChild(n, i)
			if n.items[i].k.less(it.k) {
				i++
			}
		}
		n = n.children[i]
	}
}

// remove deletes the item with key k and reports whether it was present.
func (t *btree) remove(k freeKey) bool {
	if t.root == nil {
		return false
	}
	ok := t.removeFrom(t.root, k)
	if len(t.root.items) == 0 && !t.root.leaf() {
		old := t.root
		t.root = old.children[0]
		t.recycle(old)
	}
	if ok {
		t.n--
	}
	return ok
}

// remove deletes k from the subtree. Before descending into a child the
// child is grown to more than the minimum, so a deletion never has to walk
// back up.
func (t *btree) removeFrom(n *bnode, k freeKey) bool {
	for {
		i, found := n.search(k)
		if n.leaf() {
			if !found {
				return false
			}
			copy(n.items[i:], n.items[i+1:])
			n.items[len(n.items)-1] = freeItem{}
			n.items = n.items[:len(n.items)-1]
			return true
		}
		if len(n.children[i].items) <= btreeMinItems {
			t.growChild(n, i)
			continue // the layout of n changed; search again
		}
		if found {
			// Replace the separator by its predecessor, the largest item of
			// the left subtree.
			n.items[i] = t.removeMax(n.children[i])
			return true
		}
		n = n.children[i]
	}
}

func (t *btree) removeMax(n *bnode) freeItem {
	for {
		if n.leaf() {
			last := n.items[len(n.items)-1]
			n.items[len(n.items)-1] = freeItem{}
			n.items = n.items[:len(n.items)-1]
			return last
		}
		i := len(n.items)
		if len(n.children[i].items) <= btreeMinItems {
			t.growChild(n, i)
			continue
		}
		n = n.children[i]
	}
}

// growChild gives child i more than the minimum number of items, by taking
// one from a sibling through the separator or by merging with a sibling.
func (t *btree) growChild(n *bnode, i int) {
	if i > 0 && len(n.children[i-1].items) > btreeMinItems {
		child, left := n.children[i], n.children[i-1]
		child.items = append(child.items, freeItem{})
		copy(child.items[1:], child.items)
		child.items[0] = n.items[i-1]
		n.items[i-1] = left.items[len(left.items)-1]
		left.items[len(left.items)-1] = freeItem{}
		left.items = left.items[:len(left.items)-1]
		if !left.leaf() {
			child.children = append(child.children, nil)
			copy(child.children[1:], child.children)
			child.children[0] = left.children[len(left.children)-1]
			left.children[len(left.children)-1] = nil
			left.children = left.children[:len(left.children)-1]
		}
		return
	}
	if i < len(n.items) && len(n.children[i+1].items) > btreeMinItems {
		child, right := n.children[i], n.children[i+1]
		child.items = append(child.items, n.items[i])
		n.items[i] = right.items[0]
		copy(right.items, right.items[1:])
		right.items[len(right.items)-1] = freeItem{}
		right.items = right.items[:len(right.items)-1]
		if !right.leaf() {
			child.children = append(child.children, right.children[0])
			copy(right.children, right.children[1:])
			right.children[len(right.children)-1] = nil
			right.children = right.children[:len(right.children)-1]
		}
		return
	}
	if i >= len(n.items) {
		i--
	}
	child, right := n.children[i], n.children[i+1]
	child.items = append(child.items, n.items[i])
	child.items = append(child.items, right.items...)
	if !child.leaf() {
		child.children = append(child.children, right.children...)
	}
	copy(n.items[i:], n.items[i+1:])
	n.items[len(n.items)-1] = freeItem{}
	n.items = n.items[:len(n.items)-1]
	copy(n.children[i+1:], n.children[i+2:])
	n.children[len(n.children)-1] = nil
	n.children = n.children[:len(n.children)-1]
	t.recycle(right)
}

// lowerBound returns the first item whose key is >= k.
func (t *btree) lowerBound(k freeKey) (freeItem, bool) {
	var best freeItem
	ok := false
	for n := t.root; n != nil; {
		i, found := n.search(k)
		if i < len(n.items) {
			best, ok = n.items[i], true
			if found {
				return best, true
			}
		}
		if n.leaf() {
			break
		}
		n = n.children[i]
	}
	return best, ok
}

// after returns the first item whose key is > k.
func (t *btree) after(k freeKey) (freeItem, bool) {
	var best freeItem
	ok := false
	for n := t.root; n != nil; {
		i, found := n.search(k)
		if found {
			i++
		}
		if i < len(n.items) {
			best, ok = n.items[i], true
		}
		if n.leaf() {
			break
		}
		n = n.children[i]
	}
	return best, ok
}

// before returns the last item whose key is < k.
func (t *btree) before(k freeKey) (freeItem, bool) {
	var best freeItem
	ok := false
	for n := t.root; n != nil; {
		i, _ := n.search(k)
		if i > 0 {
			best, ok = n.items[i-1], true
		}
		if n.leaf() {
			break
		}
		n = n.children[i]
	}
	return best, ok
}

// min returns the smallest item.
func (t *btree) min() (freeItem, bool) {
	n := t.root
	if n == nil || len(n.items) == 0 {
		return freeItem{}, false
	}
	for !n.leaf() {
		n = n.children[0]
	}
	return n.items[0], true
}

// ascend calls fn for every item in key order until fn returns false. The
// tree must not be modified during the walk.
func (t *btree) ascend(fn func(freeItem) bool) {
	if t.root != nil {
		t.root.ascend(fn)
	}
}

func (n *bnode) ascend(fn func(freeItem) bool) bool {
	for i, it := range n.items {
		if !n.leaf() && !n.children[i].ascend(fn) {
			return false
		}
		if !fn(it) {
			return false
		}
	}
	if !n.leaf() {
		return n.children[len(n.items)].ascend(fn)
	}
	return true
}

// blocks returns the blocks in key order (a snapshot, safe to mutate the
// tree while iterating over it).
func (t *btree) blocks() []*block {
	out := make([]*block, 0, t.n)
	t.ascend(func(it freeItem) bool {
		out = append(out, it.b)
		return true
	})
	return out
}

// check verifies the B-tree invariants; tests use it.
func (t *btree) check() error {
	if t.root == nil {
		if t.n != 0 {
			return fmt.Errorf("btree: nil root with n=%d", t.n)
		}
		return nil
	}
	var keys []freeKey
	depth := -1
	var walk func(n *bnode, d int, isRoot bool) error
	walk = func(n *bnode, d int, isRoot bool) error {
		if !isRoot && len(n.items) < btreeMinItems {
			return fmt.Errorf("btree: node with %d items", len(n.items))
		}
		if len(n.items) > btreeMaxItems {
			return fmt.Errorf("btree: node with %d items", len(n.items))
		}
		if n.leaf() {
			if depth == -1 {
				depth = d
			} else if depth != d {
				return fmt.Errorf("btree: leaves at depths %d and %d", depth, d)
			}
			for _, it := range n.items {
				keys = append(keys, it.k)
			}
			return nil
		}
		if len(n.children) != len(n.items)+1 {
			return fmt.Errorf("btree: %d items, %d children", len(n.items), len(n.children))
		}
		for i, it := range n.items {
			if err := walk(n.children[i], d+1, false); err != nil {
				return err
			}
			keys = append(keys, it.k)
		}
		return walk(n.children[len(n.items)], d+1, false)
	}
	if err := walk(t.root, 0, true); err != nil {
		return err
	}
	if len(keys) != t.n {
		return fmt.Errorf("btree: %d keys, n=%d", len(keys), t.n)
	}
	if !sort.SliceIsSorted(keys, func(i, j int) bool { return keys[i].less(keys[j]) }) {
		return fmt.Errorf("btree: keys out of order")
	}
	for i := 1; i < len(keys); i++ {
		if !keys[i-1].less(keys[i]) {
			return fmt.Errorf("btree: duplicate or unordered key at %d", i)
		}
	}
	return nil
}
